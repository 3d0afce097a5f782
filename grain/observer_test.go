package grain

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// recordingObserver counts what it is told, by type, kind and code.
type recordingObserver struct {
	mu      sync.Mutex
	handled map[string]int
	refused map[string]int
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{handled: map[string]int{}, refused: map[string]int{}}
}

func obsKey(typ string, kind Kind, code codes.Code) string {
	return typ + "/" + kind.String() + "/" + code.String()
}

func (o *recordingObserver) Handled(typ string, kind Kind, code codes.Code, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d < 0 {
		o.handled["negative duration"]++
	}
	o.handled[obsKey(typ, kind, code)]++
}

func (o *recordingObserver) Refused(typ string, kind Kind, code codes.Code) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused[obsKey(typ, kind, code)]++
}

func (o *recordingObserver) counts() (handled, refused map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, r := map[string]int{}, map[string]int{}
	for k, v := range o.handled {
		h[k] = v
	}
	for k, v := range o.refused {
		r[k] = v
	}
	return h, r
}

func TestObserver(t *testing.T) {
	obs := newRecordingObserver()
	cfg := DefaultConfig()
	cfg.Observer = obs
	evented := make(chan struct{})
	rt := newRuntime(t, cfg, map[string]Factory{
		"Echo": echoFactory,
		"Fail": func(Host) (Agent, error) {
			return &funcAgent{
				onMessage: func(context.Context, *Message) (*Message, error) {
					return nil, errs.New(codes.FailedPrecondition, "no")
				},
				onEvent: func(context.Context, *Message) error { close(evented); return nil },
			}, nil
		},
	})
	if _, err := ask(t, rt, "Echo:a", "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, rt, "Echo:a", "hi"); err != nil {
		t.Fatal(err)
	}
	_, err := ask(t, rt, "Fail:a", "hi")
	wantCode(t, err, codes.FailedPrecondition, "no")
	_, err = ask(t, rt, "Nope:a", "hi")
	wantCode(t, err, codes.NotFound, "Nope")
	_, err = ask(t, rt, "Echo:bad address!", "hi")
	wantCode(t, err, codes.InvalidArgument, "")
	if err := rt.Send(t.Context(), &Message{From: "Session:tester:s1", To: "Fail:a", Kind: KindEvent}); err != nil {
		t.Fatal(err)
	}
	<-evented
	// The event's Handled follows its handler's return: wait for the turn
	// to end by asking the same agent, whose mailbox keeps order.
	_, err = ask(t, rt, "Fail:a", "hi")
	wantCode(t, err, codes.FailedPrecondition, "no")

	handled, refused := obs.counts()
	want := map[string]int{
		"Echo/KIND_REQUEST/OK":                 2,
		"Fail/KIND_REQUEST/FailedPrecondition": 2,
		"Fail/KIND_EVENT/OK":                   1,
	}
	if !equalCounts(handled, want) {
		t.Errorf("handled %v, want %v", handled, want)
	}
	wantRefused := map[string]int{
		"/KIND_REQUEST/NotFound":            1,
		"Echo/KIND_REQUEST/InvalidArgument": 1,
	}
	if !equalCounts(refused, wantRefused) {
		t.Errorf("refused %v, want %v", refused, wantRefused)
	}

	counts := rt.CountActivations()
	got := map[string]int{}
	for _, c := range counts {
		got[c.Type] = c.Activations
	}
	if want := map[string]int{"Echo": 1, "Fail": 1}; !equalCounts(got, want) {
		t.Errorf("CountActivations %v, want %v", got, want)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTraceparentInherited checks that a message sent from a turn carries
// the traceparent of the message being handled, unless it sets its own, and
// that Traceparent reads it from the handler's context.
func TestTraceparentInherited(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var seen sync.Map // agent alias -> traceparent of its message
	var ctxSeen atomic.Value
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Echo": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				seen.Store(m.To, m.traceparent)
				return reply(m, "")
			}}, nil
		},
		"Front": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				ctxSeen.Store(Traceparent(ctx))
				if _, err := h.Ask(ctx, "Echo:b", Text("inherits")); err != nil {
					return nil, err
				}
				if _, err := h.Ask(ctx, "Echo:c", &Message{traceparent: own}); err != nil {
					return nil, err
				}
				return reply(m, "")
			}}, nil
		},
	})
	if _, err := rt.Ask(WithTraceparent(t.Context(), tp), &Message{From: "Session:tester:s1", To: "Front:a"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := seen.Load("Echo:tester:b"); got != tp {
		t.Errorf("Echo:b got traceparent %q, want the turn's %q", got, tp)
	}
	if got, _ := seen.Load("Echo:tester:c"); got != own {
		t.Errorf("Echo:c got traceparent %q, want its own %q", got, own)
	}
	if got := ctxSeen.Load(); got != tp {
		t.Errorf("Traceparent(ctx) = %q, want %q", got, tp)
	}
	if got := Traceparent(t.Context()); got != "" {
		t.Errorf("Traceparent outside a turn = %q", got)
	}
}

// countingObserver is the cheapest Observer: what the seam itself costs.
type countingObserver struct{ handled, refused atomic.Int64 }

func (o *countingObserver) Handled(string, Kind, codes.Code, time.Duration) { o.handled.Add(1) }
func (o *countingObserver) Refused(string, Kind, codes.Code)                { o.refused.Add(1) }

// BenchmarkAskObserved is BenchmarkAsk with an Observer that counts.
func BenchmarkAskObserved(b *testing.B) {
	o := new(countingObserver)
	benchAskWith(b, 1, func(c *Config) { c.Observer = o })
	if o.refused.Load() != 0 {
		b.Error(errors.New("refused messages"))
	}
}
