package acl_test

import (
	"fmt"

	"github.com/agentsilo/agentsilo/acl"
)

func ExamplePolicy_Check() {
	// An ACL file: premium callers may message and read bob's
	// support agents; nobody else may touch them.
	d, err := acl.ParseDocument([]byte(`{"Rules": [
		{"OwnerPattern": "bob", "AgentPattern": "support-*", "CallerPattern": "group:premium", "Permission": "Message,Read"}],
		"Groups": {"premium": ["alice"]}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := acl.Compile(d)
	if err != nil {
		fmt.Println(err)
		return
	}
	check := func(who, owner, alias string, need acl.Permission) {
		dec := p.Check(&acl.Caller{Principal: who}, owner, alias, need)
		fmt.Printf("%s %v on %s:%s: allowed=%v (%v)\n", who, need, owner, alias, dec.Allowed, dec.Reason)
	}
	check("alice", "bob", "support-1", acl.Message)
	check("alice", "bob", "support-1", acl.Configure)
	check("carol", "bob", "support-1", acl.Message)
	check("bob", "bob", "support-1", acl.Admin)
	// Output:
	// alice Message on bob:support-1: allowed=true (rule)
	// alice Configure on bob:support-1: allowed=false (rule)
	// carol Message on bob:support-1: allowed=false (default deny)
	// bob Admin on bob:support-1: allowed=true (own agent)
}
