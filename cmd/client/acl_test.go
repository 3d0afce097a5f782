package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func hashKey(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

// startSecureSilos starts two silos sharing one etcd (the first runs it
// embedded, the second points --etcd-endpoints at it), each with its own
// gateway, both authenticating the API keys of alice, bob and root (group
// admins) and seeded with an ACL file. They host the demo agents and Who,
// which replies with the sender's address.
func startSecureSilos(t *testing.T) (a, b *cluster.Silo) {
	t.Helper()
	keys := writeFile(t, "keys.json", fmt.Sprintf(`{"keys": [
		{"sha256": %q, "principal": "alice"},
		{"sha256": %q, "principal": "bob"},
		{"sha256": %q, "principal": "root", "groups": ["admins"]}]}`, hashKey("alice-key"), hashKey("bob-key"), hashKey("root-key")))
	aclFile := writeFile(t, "acl.json", `{"Rules": [{"OwnerPattern": "system", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Message,Read"}]}`)
	etcdAddr := freeAddr(t)
	start := func(name string, etcd etcdstore.Config) *cluster.Silo {
		reg := grain.NewRegistry()
		if err := demoagents.Register(reg); err != nil {
			t.Fatal(err)
		}
		who := func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.Message = m.From
			return r, nil
		}
		if err := reg.Register("Who", func(h grain.Host) (grain.Agent, error) { return agent{h, who}, nil }); err != nil {
			t.Fatal(err)
		}
		cfg := cluster.DefaultSiloConfig()
		cfg.Name = name
		cfg.GatewayAddr = "127.0.0.1:0"
		cfg.HTTPAddr = ""
		cfg.Etcd = etcd
		cfg.ACLFile = aclFile
		cfg.Gateway.Auth.KeyFile = keys
		cfg.Logger = slog.New(slog.DiscardHandler)
		s, err := cluster.NewSilo(cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(context.Background()); err != nil {
				t.Errorf("close %s: %v", name, err)
			}
		})
		return s
	}
	a = start("a", etcdstore.Config{DataDir: t.TempDir(), EmbeddedAddr: etcdAddr, EmbeddedPeerAddr: freeAddr(t), Prefix: "/e2e/"})
	b = start("b", etcdstore.Config{Endpoints: []string{"http://" + etcdAddr}, Prefix: "/e2e/"})
	return a, b
}

// dialKey opens an SDK session on addr with an API key.
func dialKey(t *testing.T, addr, key string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{addr}, client.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor asks to through c until the outcome is what want says (nil:
// allowed; else the error it must be), bounded by a context. A change of the
// ACL reaches another silo through its etcd watch.
func waitFor(t *testing.T, c *client.Client, to string, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		_, err := c.Ask(ctx, to, &client.Message{Message: "hi"})
		if want == nil && err == nil || want != nil && errors.Is(err, want) {
			return
		}
		if err != nil && !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("ask %s: %v", to, err)
		}
		t.Logf("ask %s: %v; waiting for the ACL change", to, err)
		select {
		case <-ctx.Done():
			t.Fatalf("ask %s: the ACL change did not arrive: %v", to, ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling interval, not an assertion
		}
	}
}

// End to end: two silos sharing one etcd, API keys, the ACL changed through
// the CLI on one silo and in force on the other.
func TestACLEndToEnd(t *testing.T) {
	a, b := startSecureSilos(t)
	addrA, addrB := a.GatewayAddr(), b.GatewayAddr()

	// Own agent: allowed. Another owner's: PermissionDenied, exit 4.
	if out, errOut, code := runClient(t, addrA, "--api-key", "alice-key", "ask", "Echo:x", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("own agent: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runClient(t, addrA, "--api-key", "alice-key", "ask", "Echo:bob:x", "hi"); code != 4 ||
		!strings.HasPrefix(errOut, "error: PermissionDenied: ") || !strings.Contains(errOut, "Message") {
		t.Fatalf("other owner's agent: code %d, stderr %q", code, errOut)
	}
	// No key, a wrong key: Unauthenticated, exit 4; the key from the environment works.
	for _, args := range [][]string{{"ask", "Echo:x", "hi"}, {"--api-key", "wrong", "ask", "Echo:x", "hi"}} {
		if _, errOut, code := runClient(t, addrA, args...); code != 4 || !strings.HasPrefix(errOut, "error: Unauthenticated: ") {
			t.Fatalf("%v: code %d, stderr %q", args, code, errOut)
		}
	}
	cmd := command(t, addrA, "ask", "Echo:x", "hi")
	cmd.Env = append(cmd.Env, "AGENTSILO_API_KEY=bob-key")
	if out, err := cmd.Output(); err != nil || string(out) != "hi\n" {
		t.Fatalf("AGENTSILO_API_KEY: %q, %v", out, err)
	}
	// Empty listings say so; in JSON, the list is there and empty.
	if out, errOut, code := runClient(t, addrA, "--api-key", "alice-key", "reminders", "Echo:x"); code != 0 || out != "none\n" {
		t.Fatalf("reminders of an agent without any: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "acl", "groups"); code != 0 || out != "none\n" {
		t.Fatalf("acl groups without groups: code %d, stdout %q", code, out)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "-o", "json", "acl", "groups"); code != 0 || !strings.Contains(compactJSON(t, out), `"groups":[]`) {
		t.Fatalf("acl groups -o json without groups: code %d, stdout %q", code, out)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "alice-key", "-o", "json", "reminders", "Echo:x"); code != 0 || compactJSON(t, out) != `{"reminders":[]}` {
		t.Fatalf("reminders -o json without any: code %d, stdout %q", code, out)
	}

	// A non-admin cannot change the rules.
	if _, errOut, code := runClient(t, addrA, "--api-key", "alice-key", "acl", "add", "--owner", "bob", "--caller", "alice", "--perm", "Message"); code != 4 ||
		!strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("acl add by alice: code %d, stderr %q", code, errOut)
	}

	// root adds a rule through silo a; it is in force on silo b.
	out, errOut, code := runClient(t, addrA, "--api-key", "root-key", "acl", "add", "--owner", "bob", "--agent", "*", "--caller", "alice", "--perm", "Message,Read", "--at", "1")
	if code != 0 || out != "added rule 2 at position 1\n" {
		t.Fatalf("acl add: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	aliceB := dialKey(t, addrB, "alice-key")
	waitFor(t, aliceB, "Echo:bob:x", nil)
	if out, _, code := runClient(t, addrB, "--api-key", "alice-key", "ask", "Echo:bob:x", "via b"); code != 0 || out != "via b\n" {
		t.Fatalf("ask on b after the rule: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, addrB, "--api-key", "root-key", "acl", "rules")
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) != 4 ||
		strings.Join(strings.Fields(lines[1]), " ") != "1 2 bob * alice Message,Read" || strings.Join(strings.Fields(lines[2]), " ") != "2 1 system * * Message,Read" {
		t.Fatalf("acl rules: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, addrB, "--api-key", "root-key", "acl", "check", "--caller", "alice", "--perm", "Message", "Echo:bob:x")
	if code != 0 || out != "allowed: rule 2 at position 1: bob:* -> alice -> Message,Read\n" {
		t.Fatalf("acl check: code %d, stdout %q", code, out)
	}
	// A denial is the answer, on stdout, and exit status 4, as
	// PermissionDenied's.
	out, errOut, code = runClient(t, addrB, "--api-key", "root-key", "acl", "check", "--caller", "bob", "--perm", "Message", "alice:x")
	if code != 4 || out != "denied: default deny\n" || errOut != "" {
		t.Fatalf("acl check denied: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runClient(t, addrB, "--api-key", "root-key", "-o", "json", "acl", "check", "--caller", "bob", "--perm", "Message", "alice:x")
	var verdict struct {
		Allowed bool
		Reason  string
	}
	if err := json.Unmarshal([]byte(out), &verdict); code != 4 || err != nil || verdict.Allowed || verdict.Reason != "default deny" {
		t.Fatalf("acl check -o json denied: code %d, stdout %q, %v", code, out, err)
	}

	// root removes it through silo b; silo a denies again.
	if out, errOut, code := runClient(t, addrB, "--api-key", "root-key", "acl", "remove", "2"); code != 0 || out != "removed rule 2\n" {
		t.Fatalf("acl remove: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	aliceA := dialKey(t, addrA, "alice-key")
	waitFor(t, aliceA, "Echo:bob:x", client.ErrPermissionDenied)
	if _, _, code := runClient(t, addrA, "--api-key", "alice-key", "ask", "Echo:bob:x", "hi"); code != 4 {
		t.Fatalf("ask on a after removal: code %d", code)
	}
	if _, errOut, code := runClient(t, addrA, "--api-key", "root-key", "acl", "remove", "2"); code != 3 {
		t.Fatalf("removing a removed rule: code %d, stderr %q", code, errOut)
	}

	// Groups, through the CLI.
	if out, errOut, code := runClient(t, addrA, "--api-key", "root-key", "acl", "group", "admins", "bob"); code != 0 || out != "group admins: bob\n" {
		t.Fatalf("acl group: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "bob-key", "acl", "groups"); code != 0 || strings.Join(strings.Fields(out), " ") != "GROUP MEMBERS admins bob" {
		t.Fatalf("acl groups by bob, now in admins: code %d, stdout %q", code, out)
	}

	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "acl", "group", "premium", "alice", "carol"); code != 0 || out != "group premium: alice, carol\n" {
		t.Fatalf("acl group premium: code %d, stdout %q", code, out)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "acl", "groups"); code != 0 || !strings.Contains(out, "premium  alice, carol\n") {
		t.Fatalf("acl groups: code %d, stdout %q", code, out)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "-o", "json", "acl", "group", "premium"); code != 0 || compactJSON(t, out) != `{"name":"premium","members":[]}` {
		t.Fatalf("acl group premium (removal) -o json: code %d, stdout %q", code, out)
	}
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "acl", "group", "nobody"); code != 0 || out != "group nobody removed\n" {
		t.Fatalf("acl group removal: code %d, stdout %q", code, out)
	}

	// A forged from is ignored.
	r, err := aliceA.Ask(t.Context(), "Who:w", &client.Message{From: "Echo:bob:y"})
	if err != nil || r.Message != aliceA.Address() {
		t.Fatalf("forged from: %v, %v; want %s", r, err, aliceA.Address())
	}

	// Without rules, the listing says none, and which seed rule applies.
	if out, _, code := runClient(t, addrA, "--api-key", "root-key", "acl", "remove", "1"); code != 0 || out != "removed rule 1\n" {
		t.Fatalf("acl remove 1: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, addrA, "--api-key", "root-key", "acl", "rules")
	if code != 0 || out != "none\n(no rules set: the seed rule system:* -> * -> Message,Read applies)\n" {
		t.Fatalf("acl rules without rules: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, addrA, "--api-key", "root-key", "-o", "json", "acl", "rules")
	if out := compactJSON(t, out); code != 0 || !strings.Contains(out, `"rules":[]`) || !strings.Contains(out, `"seedRule":{`) {
		t.Fatalf("acl rules -o json without rules: code %d, stdout %q", code, out)
	}
}
