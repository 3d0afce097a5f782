//go:build !race

package grain

import (
	"context"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// maxAskAllocs bounds the allocations of one local Ask to a live agent: the
// message, its reply (msg.Response()), the turn (the handler's context) and
// the two ids, request's and reply's, made in one (BenchmarkAsk reports
// them; it was 6 when the envelope and the wait for the reply allocated).
// The race detector allocates on its own, so this runs without it (.ci/run
// runs it so).
const maxAskAllocs = 4

func TestAskAllocs(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register("Echo", echoFactory); err != nil {
		t.Fatal(err)
	}
	rt, err := New(DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	ctx := context.Background()
	if _, err := rt.Ask(ctx, &Message{To: "Echo:bench:a", From: "Session:bench:s"}); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(2000, func() {
		if _, err := rt.Ask(ctx, &Message{To: "Echo:bench:a", From: "Session:bench:s", Message: "x"}); err != nil {
			t.Fatal(err)
		}
	})
	if n > maxAskAllocs {
		t.Fatalf("a local Ask allocates %.1f times, want at most %d", n, maxAskAllocs)
	}
	t.Logf("a local Ask allocates %.1f times", n)
}

// failTracer fails the test if the runtime asks it for a span.
type failTracer struct{ t *testing.T }

func (f failTracer) Call(ctx context.Context, _ siloapi.SpanInfo, _ string) (context.Context, string, func(error)) {
	f.t.Error("a span for an untraced message")
	return ctx, "", func(error) {}
}

func (f failTracer) Turn(ctx context.Context, _ string, _ siloapi.SpanInfo) (context.Context, func(error)) {
	f.t.Error("a span for an untraced turn")
	return ctx, func(error) {}
}

func (f failTracer) Traceparent(context.Context) string { return "" }

// An agent's Ask to another agent, outside any trace, allocates as much
// with a Tracer wired in (as a silo wires one) as without: spans cost
// nothing until a message is part of a trace.
func TestAgentAskAllocsUntraced(t *testing.T) {
	allocs := func(tracer siloapi.Tracer) float64 {
		reg := NewRegistry()
		if err := reg.Register("Echo", echoFactory); err != nil {
			t.Fatal(err)
		}
		err := reg.Register("Relay", func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				return h.Ask(ctx, "Echo:bench:b", &Message{Message: m.Message})
			}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		siloapi.Wire(&cfg, siloapi.Wiring{Tracer: tracer})
		rt, err := New(cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = rt.Close(ctx)
		}()
		ctx := context.Background()
		if _, err := rt.Ask(ctx, &Message{To: "Relay:bench:a", From: "Session:bench:s"}); err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(1000, func() {
			if _, err := rt.Ask(ctx, &Message{To: "Relay:bench:a", From: "Session:bench:s", Message: "x"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := allocs(nil), allocs(failTracer{t})
	if with > without {
		t.Errorf("an agent's Ask to an agent allocates %.1f times with a Tracer wired, %.1f without", with, without)
	}
	t.Logf("an agent's Ask to an agent through a client's Ask allocates %.1f times (%.1f without a Tracer)", with, without)
}
