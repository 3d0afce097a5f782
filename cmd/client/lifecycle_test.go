package main

import (
	"strings"
	"testing"
)

// TestAgentLifecycleCLI drives, through the real client program against two
// silos sharing an etcd, the discovery and lifecycle commands: types across
// the cluster, an agent's stored state and configuration (read, delete),
// deactivation wherever the agent lives, removing a reminder, the operator's
// view of agents and every silo's activation count; each with the
// permission it needs.
func TestAgentLifecycleCLI(t *testing.T) {
	a, b := startSecureSilos(t)
	addrA, addrB := a.GatewayAddr(), b.GatewayAddr()
	as := func(key string, args ...string) (string, string, int) {
		t.Helper()
		return runClient(t, addrA, append([]string{"--api-key", key}, args...)...)
	}
	must := func(key string, args ...string) string {
		t.Helper()
		out, errOut, code := as(key, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, errOut)
		}
		return out
	}
	wantExit := func(want int, key string, args ...string) {
		t.Helper()
		if _, errOut, code := as(key, args...); code != want {
			t.Fatalf("%v: exit %d, want %d (%q)", args, code, want, errOut)
		}
	}

	// Types, with their skills; filtered by a skill's tag.
	if out := must("alice-key", "types"); !strings.Contains(out, "Counter") || !strings.Contains(out, "Ticker") || !strings.Contains(out, "count [counting,state]") {
		t.Fatalf("types: %q", out)
	}
	if out := must("alice-key", "types", "--skill", "COUNTING"); !strings.Contains(out, "Counter") || strings.Contains(out, "Echo") {
		t.Fatalf("types --skill counting: %q", out)
	}

	// State: read with its etag; others may neither read nor delete it; a
	// stale etag is Aborted; a deletion is seen by the live activation,
	// whose next save conflicts, reloads and counts from nothing.
	must("alice-key", "ask", "Counter:c", "")
	if out := must("alice-key", "ask", "Counter:c", ""); out != "2\n" {
		t.Fatalf("Counter: %q", out)
	}
	out, errOut, code := as("alice-key", "state", "Counter:c")
	if code != 0 || out != "2\n" || !strings.HasPrefix(errOut, "etag ") {
		t.Fatalf("state: exit %d, %q, %q", code, out, errOut)
	}
	etag := strings.TrimSpace(strings.TrimPrefix(errOut, "etag "))
	wantExit(4, "bob-key", "state", "Counter:alice:c")
	wantExit(4, "bob-key", "state", "delete", "Counter:alice:c")
	wantExit(1, "alice-key", "state", "delete", "Counter:c", "--etag", etag+"7")
	if out := must("alice-key", "state", "delete", "Counter:c", "--etag", etag); out != "deleted the state of Counter:c\n" {
		t.Fatalf("state delete: %q", out)
	}
	if out := must("alice-key", "state", "Counter:c"); out != "none\n" {
		t.Fatalf("state after delete: %q", out)
	}
	if out := must("alice-key", "ask", "Counter:c", ""); out != "1\n" {
		t.Fatalf("Counter after its state was deleted: %q", out)
	}

	// Configuration: read and delete, with Read and Configure.
	must("alice-key", "create", "Pipeline:p", "--config", "stages=Echo:a")
	if out := must("alice-key", "config", "Pipeline:p"); out != "stages=Echo:a\n" {
		t.Fatalf("config: %q", out)
	}
	wantExit(4, "bob-key", "config", "Pipeline:alice:p")
	wantExit(4, "bob-key", "config", "delete", "Pipeline:alice:p")
	must("alice-key", "config", "delete", "Pipeline:p")
	if out := must("alice-key", "config", "Pipeline:p"); out != "none\n" {
		t.Fatalf("config after delete: %q", out)
	}

	// Deactivation, through either gateway, wherever the agent lives.
	for i, addr := range []string{addrA, addrB} {
		must("alice-key", "ask", "Echo:d", "hi")
		if out := must("alice-key", "agents", "--owner", "alice", "--type", "Echo"); !strings.Contains(out, "Echo:alice:d") {
			t.Fatalf("agents before deactivate: %q", out)
		}
		wantExit(4, "bob-key", "--addr", addr, "deactivate", "Echo:alice:d")
		if out, errOut, code := runClient(t, addr, "--api-key", "alice-key", "deactivate", "Echo:d"); code != 0 || out != "deactivated Echo:d\n" {
			t.Fatalf("deactivate through gateway %d: exit %d, %q, %q", i, code, out, errOut)
		}
		if out := must("alice-key", "agents", "--owner", "alice", "--type", "Echo"); strings.Contains(out, "Echo:alice:d") {
			t.Fatalf("agents after deactivate through gateway %d: %q", i, out)
		}
		// Again, or an agent that never was active: nothing to do, and
		// the command says so. Each agent lives on one of the two silos,
		// so one of the two gateways asks the other silo (the peer
		// message), the other its own runtime.
		for _, agent := range []string{"Echo:d", "Echo:never"} {
			if out, errOut, code := runClient(t, addr, "--api-key", "alice-key", "deactivate", agent); code != 0 || out != agent+" was not active\n" {
				t.Fatalf("deactivate %s (not active) through gateway %d: exit %d, %q, %q; want %q", agent, i, code, out, errOut, agent+" was not active\n")
			}
		}
	}

	// Reminders: remove one (Configure), then it is gone; again is NotFound.
	must("alice-key", "ask", "Ticker:t", "start 1m")
	if out := must("alice-key", "reminders", "Ticker:t"); !strings.Contains(out, "tick") {
		t.Fatalf("reminders: %q", out)
	}
	wantExit(4, "bob-key", "reminders", "remove", "Ticker:alice:t", "tick")
	if out := must("alice-key", "reminders", "remove", "Ticker:t", "tick"); out != "removed reminder tick of Ticker:t\n" {
		t.Fatalf("reminders remove: %q", out)
	}
	if out := must("alice-key", "reminders", "Ticker:t"); out != "none\n" {
		t.Fatalf("reminders after remove: %q", out)
	}
	wantExit(3, "alice-key", "reminders", "remove", "Ticker:t", "tick")

	// The operator (group admins) sees every owner's agents; bob does not
	// see alice's, nor --owner alice's.
	must("bob-key", "ask", "Echo:mine", "hi")
	if out := must("root-key", "agents"); !strings.Contains(out, "Counter:alice:c") || !strings.Contains(out, "Echo:bob:mine") {
		t.Fatalf("agents for an operator: %q", out)
	}
	if out := must("root-key", "agents", "--owner", "bob"); strings.Contains(out, "alice") || !strings.Contains(out, "Echo:bob:mine") {
		t.Fatalf("agents --owner bob for an operator: %q", out)
	}
	if out := must("bob-key", "agents"); strings.Contains(out, "alice") {
		t.Fatalf("agents for bob: %q", out)
	}

	// Every silo reports its own activation count: the counts add up to
	// the activations the operator lists.
	agents := strings.Count(must("root-key", "-o", "json", "agents"), `"address"`)
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(must("root-key", "members")), "\n")[1:] {
		f := strings.Fields(line)
		var n int
		for _, c := range f[len(f)-1] {
			n = 10*n + int(c-'0')
		}
		total += n
	}
	if total != agents {
		t.Fatalf("members report %d activations in all, agents lists %d", total, agents)
	}
}
