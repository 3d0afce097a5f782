package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// shellWords splits a command line as a shell would, for the documented
// commands: words, and single-quoted strings.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimSpace(rest) {
		if q, ok := strings.CutPrefix(rest, "'"); ok {
			w, after, ok := strings.Cut(q, "'")
			if !ok {
				t.Fatalf("%q: unterminated quote", line)
			}
			words, rest = append(words, w), after
			continue
		}
		w, after, _ := strings.Cut(rest, " ")
		words, rest = append(words, w), after
	}
	return words
}

// The memory commands against a silo's built-in working memory.
func TestMemoryCLI(t *testing.T) {
	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "mem"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/memcli/"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := cluster.NewSilo(cfg, grain.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	addr := s.GatewayAddr()
	must := func(args ...string) string {
		t.Helper()
		out, errOut, code := runClient(t, addr, append([]string{"--as", "dev"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, errOut)
		}
		return out
	}
	// The block of docs/memory.md, line by line.
	for _, line := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/memory.md", "memory:cli")), "\n") {
		args := shellWords(t, line)
		if args[0] != "client" {
			t.Fatalf("docs/memory.md: %q is not a client command", line)
		}
		out, errOut, code := runClient(t, addr, args[1:]...)
		if code != 0 {
			t.Fatalf("docs/memory.md: %s: exit %d, %q", line, code, errOut)
		}
		if strings.Contains(line, " get ") && out != "Hotel Avenida\n" || strings.Contains(line, " search ") && !strings.HasPrefix(out, "hotel ") {
			t.Errorf("docs/memory.md: %s: %q", line, out)
		}
	}

	if out := must("memory", "put", "Memory:dev:t2", "hotel", "Hotel", "Avenida", "--category", "booking", "--tag", "lisbon", "--ttl", "2h"); !strings.HasPrefix(out, "hotel (expires ") {
		t.Errorf("put: %q", out)
	}
	must("memory", "put", "Memory:dev:t2", "budget", "--value", `{"eur":900}`)
	if out, _, code := runStdin(t, addr, "Flight TP123\n", "--as", "dev", "memory", "put", "Memory:dev:t2", "flight", "-"); code != 0 || !strings.HasPrefix(out, "flight ") {
		t.Errorf("put from stdin: %d %q", code, out)
	}
	if out := must("memory", "get", "Memory:dev:t2", "hotel"); out != "Hotel Avenida\n" {
		t.Errorf("get: %q", out)
	}
	if out := must("memory", "get", "Memory:dev:t2", "budget"); out != "{\"eur\":900}\n" {
		t.Errorf("get a value: %q", out)
	}
	if out := must("memory", "list", "Memory:dev:t2", "--category", "booking"); !strings.HasPrefix(out, "hotel") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "lisbon") {
		t.Errorf("list --category: %q", out)
	}
	var es []client.MemoryEntry
	if err := json.Unmarshal([]byte(must("-o", "json", "memory", "search", "Memory:dev:t2", "tp123")), &es); err != nil || len(es) != 1 || es[0].Text != "Flight TP123" {
		t.Errorf("search -o json: %v %+v", err, es)
	}
	must("memory", "delete", "Memory:dev:t2", "hotel")
	if _, errOut, code := runClient(t, addr, "--as", "dev", "memory", "get", "Memory:dev:t2", "hotel"); code != 3 || !strings.Contains(errOut, "NotFound") {
		t.Errorf("get deleted: %d %q", code, errOut)
	}
	if out := must("memory", "list", "Memory:dev:t2", "--prefix", "zzz"); out != "none\n" {
		t.Errorf("empty list: %q", out)
	}
	if _, _, code := runClient(t, addr, "--as", "dev", "memory", "put", "Memory:dev:t2", "k", "--value", "{"); code != 2 {
		t.Errorf("bad --value: exit %d", code)
	}
	if out := must("help", "memory", "put"); !strings.Contains(out, "--ttl") {
		t.Errorf("help memory put: %q", out)
	}
}
