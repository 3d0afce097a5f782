package main

import (
	"strings"
	"testing"
)

// TestACLAddSaysItReplacesTheSeed: while no rules are set the seed rule
// applies, and the first rule added replaces it: acl add says so (on
// stderr, so JSON output stays JSON), and how to keep what it allowed; a
// rule added to rules of one's own says nothing of it.
func TestACLAddSaysItReplacesTheSeed(t *testing.T) {
	a, _ := startSecureSilos(t)
	root := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, code := runClient(t, a.GatewayAddr(), append([]string{"--api-key", "root-key"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, errOut)
		}
		return out, errOut
	}
	root("acl", "remove", "1") // the ACL file's one rule: none is left
	if out, _ := root("acl", "rules"); !strings.Contains(out, "the seed rule system:* -> * -> Message,Read applies") {
		t.Fatalf("acl rules without rules: %q", out)
	}
	out, errOut := root("acl", "add", "--owner", "bob", "--caller", "alice", "--perm", "Message")
	if !strings.HasPrefix(out, "added rule ") || !strings.Contains(errOut, "replaces the seed rule system:* -> * -> Message,Read") ||
		!strings.Contains(errOut, "client acl add --owner system --agent '*' --caller '*' --perm Message,Read") {
		t.Fatalf("the first acl add: stdout %q, stderr %q; want a note that it replaces the seed rule", out, errOut)
	}
	if _, errOut := root("acl", "add", "--owner", "bob", "--caller", "carol", "--perm", "Read"); errOut != "" {
		t.Fatalf("a second acl add: stderr %q, want nothing", errOut)
	}
}
