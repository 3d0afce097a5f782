package grain

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// A key is handed to a receiver once within the window: a retried Ask
// gets the first reply, also while the first is still in its turn; a
// retried Send is dropped; a transient failure is not remembered; other
// receivers and keys are not affected; after the window the key is new.
func TestIdempotencyKeys(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	var runs atomic.Int64
	release, started := make(chan struct{}), make(chan struct{})
	var failOnce sync.Once
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: clk})
	cfg.IdempotencyWindow = time.Minute
	rt := newRuntime(t, cfg, map[string]Factory{
		"Counter": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				switch m.Message {
				case "slow":
					close(started)
					<-release
				case "flaky":
					var err error
					failOnce.Do(func() { err = errs.New(codes.Unavailable, "not now") })
					if err != nil {
						return nil, err
					}
				case "fail":
					runs.Add(1)
					return nil, errors.New("handler failed")
				}
				return reply(m, strconv.FormatInt(runs.Add(1), 10))
			}}, nil
		},
	})
	ctx := t.Context()
	askKey := func(to, text, key string) (*Message, error) {
		return rt.Ask(ctx, &Message{From: "Session:tester:s1", To: to, Message: text, IdempotencyKey: key})
	}
	r1, err := askKey("Counter:o:a", "x", "k1")
	if err != nil || r1.Message != "1" {
		t.Fatalf("first: %v %v", r1, err)
	}
	r2, err := askKey("Counter:o:a", "x", "k1")
	if err != nil || r2.Message != "1" || r2.CorrelationID == r1.CorrelationID {
		t.Fatalf("retry: %v %v (first %v)", r2, err, r1)
	}
	if r, _ := askKey("Counter:o:b", "x", "k1"); r.Message != "2" {
		t.Fatalf("another receiver with the key: %v", r)
	}
	if r, _ := askKey("Counter:o:a", "x", "k2"); r.Message != "3" {
		t.Fatalf("another key: %v", r)
	}
	// A retry while the first is in its turn waits for its reply.
	first := make(chan *Message, 1)
	go func() {
		r, _ := askKey("Counter:o:c", "slow", "k3")
		first <- r
	}()
	<-started
	second := make(chan *Message, 1)
	go func() {
		r, _ := askKey("Counter:o:c", "slow", "k3")
		second <- r
	}()
	close(release)
	a, b := <-first, <-second
	if a.Message != "4" || b.Message != "4" {
		t.Fatalf("concurrent retry: %v and %v", a, b)
	}
	// Sends: the second is dropped.
	for range 2 {
		if err := rt.Send(ctx, &Message{From: "Session:tester:s1", To: "Counter:o:d", Message: "x", IdempotencyKey: "k4"}); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := ask(t, rt, "Counter:o:d", "x"); r.Message != "6" {
		t.Fatalf("after two keyed sends, the count is %v, want 6 (one send ran)", r)
	}
	// A transient failure is forgotten: the retry runs.
	if _, err := askKey("Counter:o:e", "flaky", "k5"); errs.Code(err) != codes.Unavailable {
		t.Fatalf("flaky first: %v", err)
	}
	if r, err := askKey("Counter:o:e", "flaky", "k5"); err != nil || r.Message != "7" {
		t.Fatalf("flaky retry: %v %v", r, err)
	}
	// A handler's error is remembered.
	if _, err := askKey("Counter:o:e", "fail", "k6"); err == nil {
		t.Fatal("fail: no error")
	}
	if _, err := askKey("Counter:o:e", "fail", "k6"); err == nil || runs.Load() != 8 {
		t.Fatalf("fail retried: %v, %d runs", err, runs.Load())
	}
	// After the window, the key is new.
	clk.Advance(2 * time.Minute)
	if r, _ := askKey("Counter:o:a", "x", "k1"); r.Message != "9" {
		t.Fatalf("after the window: %v", r)
	}
}

// The cache is bounded: past IdempotencyKeys, the oldest keys go.
func TestIdempotencyBound(t *testing.T) {
	var c idemCache
	c.init(time.Hour, 3)
	for i := range 10 {
		if _, dup := c.begin(strconv.Itoa(i), int64(i)); dup {
			t.Fatalf("key %d seen before", i)
		}
	}
	if len(c.m) != 3 {
		t.Fatalf("%d keys kept, want 3", len(c.m))
	}
	if _, dup := c.begin("9", 11); !dup {
		t.Fatal("the newest key was forgotten")
	}
	if _, dup := c.begin("0", 12); dup {
		t.Fatal("the oldest key was kept")
	}
}

// A reply marked Provisional is not kept as its key's answer: a retry with
// the key reaches the agent again, and the first final reply is kept.
func TestIdempotencyProvisional(t *testing.T) {
	var runs atomic.Int64
	cfg := DefaultConfig()
	cfg.IdempotencyWindow = time.Minute
	rt := newRuntime(t, cfg, map[string]Factory{
		"Waiter": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				n := runs.Add(1)
				r, err := reply(m, strconv.FormatInt(n, 10))
				if n < 3 {
					r = Provisional(r)
				}
				return r, err
			}}, nil
		},
	})
	for i, want := range []string{"1", "2", "3", "3"} {
		r, err := rt.Ask(t.Context(), &Message{From: "Session:tester:s1", To: "Waiter:o:w", Message: "x", IdempotencyKey: "k"})
		if err != nil || r.Message != want {
			t.Fatalf("ask %d: %v %v, want %s", i+1, r, err, want)
		}
		if provisional := r.State[StateProvisional] != ""; provisional != (want < "3") {
			t.Fatalf("ask %d: state %v", i+1, r.State)
		}
	}
}
