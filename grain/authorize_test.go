package grain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// recordingAuthorizer allows what allow says and reports every check as
// "principal->to" on checks.
type recordingAuthorizer struct {
	allow  func(principal string, to Address) bool
	checks chan string
}

func (z *recordingAuthorizer) AuthorizeMessage(_ context.Context, principal string, to Address) error {
	z.checks <- principal + "->" + to.String()
	if z.allow(principal, to) {
		return nil
	}
	return errs.New(codes.PermissionDenied, "%s may not message %s", principal, to)
}

// drain returns, sorted, what ch holds now.
func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			sort.Strings(out)
			return out
		}
	}
}

// TestOnBehalfOfFollowsTheCallChain: what an agent sends carries the
// principal of the message it handles (whatever the agent put there), and
// a message to another owner's agent is checked against it; messages
// between one owner's agents are not checked; a timer's tick is on behalf
// of the agent's owner; Broadcast skips the agents the principal may not
// message.
func TestOnBehalfOfFollowsTheCallChain(t *testing.T) {
	z := &recordingAuthorizer{checks: make(chan string, 16), allow: func(p string, to Address) bool {
		return to.Owner == "shared" || (p == "ops" && to.Owner == "bob")
	}}
	seen := make(chan string, 16) // "to: on_behalf_of" of what Relay got
	var relay Factory = func(h Host) (Agent, error) {
		return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
			seen <- fmt.Sprintf("%s: %s", h.Address(), m.OnBehalfOf)
			switch {
			case m.MessageType == "tick":
				return nil, h.Send(ctx, m.Message, &Message{OnBehalfOf: "root"})
			case strings.HasPrefix(m.Message, "timer "):
				return nil, h.RegisterTimer("t", 0, 0, "tick", strings.TrimPrefix(m.Message, "timer "))
			case strings.HasPrefix(m.Message, "broadcast "):
				n, err := h.Broadcast(ctx, strings.TrimPrefix(m.Message, "broadcast "), &Message{})
				if err != nil {
					return nil, err
				}
				return reply(m, fmt.Sprint(n))
			case m.Message != "":
				// Forward, claiming (in vain) to act for root.
				return h.Ask(ctx, m.Message, &Message{OnBehalfOf: "root"})
			}
			return reply(m, "")
		}}, nil
	}
	cfg := DefaultConfig()
	cfg.Authorizer = z
	rt := newRuntime(t, cfg, map[string]Factory{"Relay": relay})
	askAs := func(p, to, text string) (string, error) {
		r, err := rt.Ask(t.Context(), &Message{From: "Session:" + p + ":s", OnBehalfOf: p, To: to, Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}

	// alice's agent relays to her own agent: not checked, on behalf of
	// alice all along.
	if _, err := askAs("alice", "Relay:alice:a", "Relay:alice:b"); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(drain(seen)), "[Relay:alice:a: alice Relay:alice:b: alice]"; got != want {
		t.Fatalf("seen %s, want %s", got, want)
	}
	if c := drain(z.checks); len(c) != 0 {
		t.Fatalf("checks %v for one owner's agents", c)
	}
	// To bob's agent: checked as alice (not as root, not as the relay's
	// owner), and denied.
	if _, err := askAs("alice", "Relay:alice:a", "Relay:bob:x"); !errors.Is(err, errs.ErrPermissionDenied) {
		t.Fatalf("alice's agent to bob's: %v, want PermissionDenied", err)
	}
	if got := fmt.Sprint(drain(z.checks)); got != "[alice->Relay:bob:x]" {
		t.Fatalf("checks %s", got)
	}
	drain(seen)
	// ops may: ops's call through alice's agent reaches bob's, and bob's
	// agent calls on as ops.
	if _, err := askAs("ops", "Relay:alice:a", "Relay:bob:x"); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(drain(seen)), "[Relay:alice:a: ops Relay:bob:x: ops]"; got != want {
		t.Fatalf("seen %s, want %s", got, want)
	}
	drain(z.checks)

	// A timer's tick is on behalf of the agent's owner: bob's timer may not
	// reach alice's agent, though ops set it.
	if _, err := askAs("ops", "Relay:bob:x", "timer Relay:alice:z"); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "Relay:bob:x: ops" {
		t.Fatalf("seen %s", got)
	}
	if got := <-seen; got != "Relay:bob:x: bob" {
		t.Fatalf("the tick: seen %s, want it on behalf of bob", got)
	}
	if got := <-z.checks; got != "bob->Relay:alice:z" {
		t.Fatalf("the tick's check: %s, want it as bob", got)
	}

	// Broadcast reaches the shared agent, not alice's.
	for _, a := range []string{"Relay:shared:s", "Relay:alice:b"} {
		if _, err := askAs("shared", a, ""); err != nil {
			t.Fatal(err)
		}
	}
	drain(seen)
	n, err := askAs("bob", "Relay:bob:x", "broadcast Relay:*")
	if err != nil || n != "1" {
		t.Fatalf("broadcast reached %q (%v), want 1", n, err)
	}
	if got, want := fmt.Sprint(drain(z.checks)), "[bob->Relay:alice:a bob->Relay:alice:b bob->Relay:shared:s]"; got != want {
		t.Fatalf("broadcast's checks %s, want %s", got, want)
	}
	if got := <-seen; got != "Relay:bob:x: bob" {
		t.Fatalf("seen %s", got)
	}
	if got := <-seen; got != "Relay:shared:s: bob" {
		t.Fatalf("seen %s, want the shared agent reached as bob", got)
	}
}
