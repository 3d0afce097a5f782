package gateway

import (
	"fmt"
	"testing"

	"github.com/agentsilo/agentsilo/acl"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// BenchmarkAuthorizeMessage is what the client grain adds to a client's
// call: resolving the target and checking it, for the caller's own agent
// (relative address) and for another owner's agent matched by the last of
// 1,000 rules. Compare with the tens of microseconds of a call through the
// gateway (go run ./tests/bench acl).
func BenchmarkAuthorizeMessage(b *testing.B) {
	var d acl.Document
	for i := range 999 {
		d.Rules = append(d.Rules, acl.Rule{OwnerPattern: fmt.Sprintf("owner-%d", i), AgentPattern: "*", CallerPattern: fmt.Sprintf("user-%d", i), Permission: acl.Message})
	}
	d.Rules = append(d.Rules, acl.Rule{OwnerPattern: "bench", AgentPattern: "*", CallerPattern: "alice", Permission: acl.Message})
	p, err := acl.Compile(d)
	if err != nil {
		b.Fatal(err)
	}
	store := acl.NewMemStore()
	if _, err := store.Put(b.Context(), p.Document(), 0); err != nil {
		b.Fatal(err)
	}
	a, err := acl.NewAuthority(acl.Config{Store: store, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	g := &Gateway{cfg: Config{ACL: a}}
	alice := &acl.Caller{Principal: "alice"}
	for _, to := range []string{"Bench:g1", "Bench:bench:g1"} {
		b.Run(to, func(b *testing.B) {
			m := &agentsilov1.AgentMessage{}
			b.ReportAllocs()
			for b.Loop() {
				m.To = to
				if err := g.authorizeMessage(alice, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
