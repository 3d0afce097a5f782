package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/listings.golden with what the client prints")

// TestListingsGolden runs every command that prints what the SDK returns
// (listings, acl check, publish, subscribe, directory add), in text and in
// JSON, against one silo, and compares what the client prints with
// testdata/listings.golden: the output is part of the contract (scripts
// parse it), so a change to the SDK's types must not change it. Values
// that differ from run to run (times, ports, ids) are masked with
// characters of the same width, so the tables' alignment is compared too;
// JSON is compacted first, as protojson varies its spaces by build on
// purpose. go test -run TestListingsGolden -update rewrites the file.
func TestListingsGolden(t *testing.T) {
	s := startListingSilo(t)
	addr := s.GatewayAddr()
	// An outside A2A agent that never answers: its entry stays as added
	// (never seen, no error) while the test runs.
	stop := make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(stop); peer.Close() })

	alice := dialKey(t, addr, "alice-key")
	testutil.WaitFor(t, "the directory to list the agent types", func() bool {
		types, err := alice.Admin().Types(t.Context(), "")
		if err != nil {
			return false
		}
		esPage, err := alice.Directory().List(t.Context(), client.DirectoryQuery{Kind: "type"})
		es := esPage.Items
		return err == nil && len(es) == len(types)
	})

	var golden strings.Builder
	run := func(key string, args ...string) {
		t.Helper()
		for _, json := range []bool{false, true} {
			a := append([]string{"--api-key", key}, args...)
			if json {
				a = append([]string{"-o", "json"}, a...)
			}
			out, errOut, code := runClient(t, addr, a...)
			fmt.Fprintf(&golden, "$ client %s\nexit %d\n%s", mask(t, strings.Join(a, " ")), code, mask(t, out))
			if errOut != "" {
				fmt.Fprintf(&golden, "stderr: %s", mask(t, errOut))
			}
		}
	}
	must := func(key string, args ...string) {
		t.Helper()
		if _, errOut, code := runClient(t, addr, append([]string{"--api-key", key}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, errOut)
		}
	}

	run("alice-key", "agents")
	run("alice-key", "members")
	must("alice-key", "ask", "Echo:one", "hi")
	must("alice-key", "ask", "Counter:c", "add 2")
	must("alice-key", "ask", "Ticker:t", "start 1m")
	run("alice-key", "agents")
	run("root-key", "agents", "--owner", "alice", "--type", "Echo")
	run("alice-key", "members")
	run("alice-key", "reminders", "Ticker:t")
	run("alice-key", "reminders", "Echo:one")
	run("alice-key", "types")
	run("alice-key", "types", "--skill", "orchestration")

	run("root-key", "acl", "rules")
	run("root-key", "acl", "check", "--caller", "alice", "--perm", "Read", "Echo:system:x")
	run("root-key", "acl", "check", "--caller", "alice", "--perm", "Message", "Echo:alice:x")
	run("root-key", "acl", "check", "--caller", "alice", "--perm", "Message", "Echo:bob:x")
	run("root-key", "acl", "add", "--owner", "bob", "--caller", "alice", "--perm", "Read", "--at", "1")
	run("root-key", "acl", "update", "2", "--owner", "bob", "--agent", "shared-*", "--caller", "alice", "--perm", "Message,Read")
	run("root-key", "acl", "rules")
	run("root-key", "acl", "check", "--caller", "alice", "--perm", "Message", "Echo:bob:shared-1")
	run("root-key", "acl", "check", "--caller", "carol", "--group", "admins", "--perm", "Admin", "system:acl")

	run("alice-key", "search", "counting", "state")
	run("alice-key", "search", "nothing-matches-this")
	run("alice-key", "directory", "list", "--kind", "type", "--limit", "3")
	run("alice-key", "directory", "get", "Counter")
	run("root-key", "directory", "add", "weather", peer.URL, "--skill", "forecast:weather,rain=Tells the weather")
	must("root-key", "directory", "remove", "weather")
	run("alice-key", "subscriptions")
	run("alice-key", "subscribe", "Inbox:in", "orders", "orders.#", "--max-attempts", "3")
	must("alice-key", "subscribe", "Inbox:in2", "orders", "orders.#")
	run("alice-key", "subscriptions")
	must("alice-key", "unsubscribe", "Inbox:in2", "orders") // one member: the dead letter's agent is known
	run("alice-key", "publish", "orders.new", "poison pill", "--key", "k1")
	testutil.WaitFor(t, "the poison message to be a dead letter", func() bool {
		p, err := alice.Topics().DeadLetters(t.Context(), "orders", client.Limit(10))
		return err == nil && len(p.Items) == 1
	})
	run("alice-key", "deadletters", "orders")
	run("alice-key", "deadletters", "orders", "--limit", "1")

	path := filepath.Join("testdata", "listings.golden")
	if *update {
		if err := os.WriteFile(path, []byte(golden.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := golden.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("the client's output differs from %s at line %d:\n got %q\nwant %q", path, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("the client's output differs from %s in length: %d lines, want %d", path, len(gl), len(wl))
	}
}

var (
	maskTime = regexp.MustCompile(`\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?`)
	maskUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	maskPort = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	maskHex  = regexp.MustCompile(`\b[0-9a-f]{12}-\d{16}\b|pub-[0-9a-f]{16}\b`) // a dead letter's id, a publisher's session
	hexDigit = regexp.MustCompile(`[0-9a-f]`)
	digit    = regexp.MustCompile(`\d`)
)

// mask replaces what differs from run to run by characters of the same
// width (a time's fraction, whose width protojson varies, is dropped), and
// compacts JSON lines.
func mask(t *testing.T, s string) string {
	s = maskTime.ReplaceAllStringFunc(s, func(m string) string {
		m, _, _ = strings.Cut(m, ".")
		return digit.ReplaceAllString(m, "0")
	})
	s = maskUUID.ReplaceAllStringFunc(s, func(m string) string { return hexDigit.ReplaceAllString(m, "x") })
	s = maskHex.ReplaceAllStringFunc(s, func(m string) string {
		p, rest := "", m
		if strings.HasPrefix(m, "pub-") {
			p, rest = "pub-", m[4:]
		}
		return p + hexDigit.ReplaceAllString(rest, "x")
	})
	s = maskPort.ReplaceAllStringFunc(s, func(m string) string { return "127.0.0.1:" + digit.ReplaceAllString(m[len("127.0.0.1:"):], "P") })
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "{") || strings.HasPrefix(l, "[") {
			lines[i] = compactJSON(t, l) + "\n"
		}
	}
	return strings.Join(lines, "")
}

// startListingSilo starts one silo with its own etcd, the demo agents, the
// API keys of alice and root (group admins) and the ACL rule system:* ->
// * -> Message,Read; its directory may reach outside entries on loopback.
func startListingSilo(t *testing.T) *cluster.Silo {
	t.Helper()
	e := etcdtest.Start(t)
	keys := writeFile(t, "keys.json", fmt.Sprintf(`{"keys": [
		{"sha256": %q, "principal": "alice"},
		{"sha256": %q, "principal": "root", "groups": ["admins"]}]}`, hashKey("alice-key"), hashKey("root-key")))
	aclFile := writeFile(t, "acl.json", `{"Rules": [{"OwnerPattern": "system", "AgentPattern": "*", "CallerPattern": "*", "Permission": "Message,Read"}]}`)
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "one"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/listings/"}
	cfg.ACLFile = aclFile
	cfg.Gateway.Auth.KeyFile = keys
	cfg.A2A.AllowPrivateNetworks = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}
