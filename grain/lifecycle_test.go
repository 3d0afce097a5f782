package grain

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// Activations' lifecycle: idle collection (the runtime's and each type's
// timeout), mailbox bounds per type, and the hand-over of messages that
// arrive while an activation ends.

type journal struct {
	mu     sync.Mutex
	live   map[string]int
	events []string
	bad    []string
}

func (j *journal) start(addr string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.live == nil {
		j.live = map[string]int{}
	}
	j.live[addr]++
	if j.live[addr] > 1 {
		j.bad = append(j.bad, addr)
	}
	j.events = append(j.events, "start")
}

func (j *journal) end(addr string, r Reason) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.live[addr]--
	j.events = append(j.events, "end:"+r.String())
}

func (j *journal) snapshot() (events, bad []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.events...), append([]string(nil), j.bad...)
}

func journaled(j *journal, onMessage func(h Host, ctx context.Context, m *Message) (*Message, error)) Factory {
	return func(h Host) (Agent, error) {
		return &funcAgent{
			onActivate:   func(context.Context) error { j.start(h.Address().String()); return nil },
			onDeactivate: func(_ context.Context, r Reason) { j.end(h.Address().String(), r) },
			onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				return onMessage(h, ctx, m)
			},
		}, nil
	}
}

// TestIdleDeactivation: an idle activation ends with ReasonIdle and the next
// message activates it again; a message in time keeps it. The clock is a
// fake one that the test moves.
func TestIdleDeactivation(t *testing.T) {
	var j journal
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: clk})
	cfg.IdleTimeout = 15 * time.Minute
	ended := make(chan Reason, 10)
	rt := newRuntime(t, cfg, map[string]Factory{
		"Idle": notifyEnd(ended, journaled(&j, func(_ Host, _ context.Context, m *Message) (*Message, error) { return reply(m, "ok") })),
	})
	askOK := func() {
		t.Helper()
		if _, err := ask(t, rt, "Idle:a:b", "x"); err != nil {
			t.Fatal(err)
		}
	}
	askOK()
	// Not idle for long enough; then a message restarts the idle time.
	for range 2 {
		clk.Advance(cfg.IdleTimeout - time.Second)
		sweep(t, rt)
		askOK() // queued behind a deactivation, if the sweep had asked for one
	}
	if events, _ := j.snapshot(); fmt.Sprint(events) != "[start]" {
		t.Fatalf("events %v before the idle timeout, want [start]", events)
	}
	clk.Advance(cfg.IdleTimeout)
	sweep(t, rt)
	if r := waitEnded(t, ended); r != ReasonIdle {
		t.Fatalf("ended with %v, want idle", r)
	}
	askOK()
	events, bad := j.snapshot()
	if len(bad) > 0 || fmt.Sprint(events) != "[start end:idle start]" {
		t.Fatalf("events %v, overlapping %v", events, bad)
	}
}

// TestIdleSweepOnTheClock: the runtime's own sweep timer runs on its Clock.
func TestIdleSweepOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: clk})
	ended := make(chan Reason, 10)
	rt := newRuntime(t, cfg, map[string]Factory{"Idle": notifyEnd(ended, echoFactory)})
	if _, err := ask(t, rt, "Idle:a:b", "x"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(cfg.IdleTimeout + sweepEvery(cfg.IdleTimeout))
	if r := waitEnded(t, ended); r != ReasonIdle {
		t.Fatalf("ended with %v, want idle", r)
	}
}

// TestTypeIdleTimeout: a type's IdleTimeout overrides the silo's, both
// ways.
func TestTypeIdleTimeout(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: clk})
	cfg.IdleTimeout = 10 * time.Minute
	ended := make(chan string, 10)
	end := func(f Factory) Factory {
		return func(h Host) (Agent, error) {
			a, err := f(h)
			if err != nil {
				return nil, err
			}
			return &funcAgent{onMessage: a.OnMessage, onDeactivate: func(_ context.Context, r Reason) { ended <- h.Address().Type + ":" + r.String() }}, nil
		}
	}
	reg := NewRegistry()
	for _, tc := range []struct {
		name string
		idle time.Duration
	}{{"Short", time.Minute}, {"Default", 0}, {"Long", time.Hour}} {
		if err := reg.Register(tc.name, end(echoFactory), TypeInfo{IdleTimeout: tc.idle}); err != nil {
			t.Fatal(err)
		}
	}
	rt := startRuntime(t, cfg, reg)
	for _, typ := range []string{"Short", "Default", "Long"} {
		if _, err := ask(t, rt, typ+":a:b", "x"); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		advance time.Duration
		ends    string
	}{{time.Minute, "Short:idle"}, {9 * time.Minute, "Default:idle"}, {50 * time.Minute, "Long:idle"}} {
		clk.Advance(step.advance - time.Second)
		sweep(t, rt)
		clk.Advance(time.Second)
		sweep(t, rt)
		select {
		case got := <-ended:
			if got != step.ends {
				t.Fatalf("after %v more: %s ended, want %s", step.advance, got, step.ends)
			}
		case <-testutil.WaitContext(t).Done():
			t.Fatalf("after %v more: nothing ended, want %s", step.advance, step.ends)
		}
	}
	waitUntil(t, "no live activation", func() bool { return rt.Len() == 0 })
	select {
	case got := <-ended:
		t.Fatalf("%s ended as well", got)
	default:
	}
}

// TestTypeMailboxSize: a type's MailboxSize bounds its mailboxes instead of
// the silo's.
func TestTypeMailboxSize(t *testing.T) {
	block, entered := make(chan struct{}), make(chan struct{}, 2)
	blocking := func(Host) (Agent, error) {
		return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
			if m.Message == "block" {
				entered <- struct{}{}
				<-block
			}
			return nil, nil
		}}, nil
	}
	reg := NewRegistry()
	if err := reg.Register("Small", blocking, TypeInfo{MailboxSize: 2}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Big", blocking); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MailboxSize = 5
	rt := startRuntime(t, cfg, reg)
	send := func(ctx context.Context, to, text string) error {
		return rt.Send(ctx, &Message{From: "Session:a:s", To: to, Message: text})
	}
	for _, to := range []string{"Small:a:s", "Big:a:b"} {
		if err := send(t.Context(), to, "block"); err != nil {
			t.Fatal(err)
		}
		<-entered // out of the mailbox, blocking the activation
	}
	// Big takes the silo's 5; Small only its 2, then the sender waits.
	for i := range 5 {
		if err := send(t.Context(), "Big:a:b", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := send(t.Context(), "Small:a:s", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- send(ctx, "Small:a:s", "over") }()
	small := rt.dir.get("Small:a:s")
	waitUntil(t, "a sender waiting for room in Small's mailbox", func() bool {
		small.mb.mu.Lock()
		defer small.mb.mu.Unlock()
		return small.mb.waiting != nil
	})
	big := rt.dir.get("Big:a:b")
	big.mb.mu.Lock()
	bigWaits := big.mb.waiting != nil
	big.mb.mu.Unlock()
	if bigWaits {
		t.Fatal("a sender waits for room in Big's mailbox")
	}
	cancel()
	wantCode(t, <-done, codes.Canceled, "cancel")
	close(block)
}

// notifyEnd makes f's agents report the reason their activation ended.
func notifyEnd(ended chan<- Reason, f Factory) Factory {
	return func(h Host) (Agent, error) {
		a, err := f(h)
		if err != nil {
			return nil, err
		}
		fa, ok := a.(*funcAgent)
		if !ok {
			fa = &funcAgent{onMessage: a.OnMessage}
		}
		prev := fa.onDeactivate
		fa.onDeactivate = func(ctx context.Context, r Reason) {
			if prev != nil {
				prev(ctx, r)
			}
			ended <- r
		}
		return fa, nil
	}
}

// sweep runs an idle sweep at the fake clock's time and waits for it.
func sweep(t *testing.T, rt *Runtime) {
	t.Helper()
	if err := rt.sweepNow(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// waitEnded waits for an activation to end, for up to testutil.WaitTimeout.
func waitEnded(t *testing.T, ended <-chan Reason) Reason {
	t.Helper()
	select {
	case r := <-ended:
		return r
	case <-testutil.WaitContext(t).Done():
		t.Fatal("no activation ended")
		return 0
	}
}

// waitUntil polls cond, a named condition another goroutine makes true,
// for up to testutil.WaitTimeout.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := testutil.WaitContext(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		default:
			waitABit()
		}
	}
}

// TestHandOverOnDeactivate: messages that arrive while an activation ends go,
// in order, to the next activation, which starts only after the first ended.
func TestHandOverOnDeactivate(t *testing.T) {
	var j journal
	var mu sync.Mutex
	var got []string
	inDeactivate := make(chan struct{})
	finishDeactivate := make(chan struct{})
	var once sync.Once
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"H": func(h Host) (Agent, error) {
			return &funcAgent{
				onActivate: func(context.Context) error { j.start(h.Address().String()); return nil },
				onDeactivate: func(_ context.Context, r Reason) {
					once.Do(func() {
						close(inDeactivate)
						<-finishDeactivate
					})
					j.end(h.Address().String(), r)
				},
				onMessage: func(_ context.Context, m *Message) (*Message, error) {
					if m.Message == "quit" {
						h.Deactivate()
						return nil, nil
					}
					mu.Lock()
					got = append(got, m.Message)
					mu.Unlock()
					return nil, nil
				},
			}, nil
		},
	})
	send := func(text string) {
		if err := rt.Send(t.Context(), &Message{From: "Session:a:s", To: "H:a:h", Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	send("quit")
	<-inDeactivate
	for i := 0; i < 10; i++ {
		send(strconv.Itoa(i))
	}
	close(finishDeactivate)
	if _, err := ask(t, rt, "H:a:h", "last"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9 last]" {
		t.Fatalf("got %v", got)
	}
	events, bad := j.snapshot()
	if len(bad) > 0 || fmt.Sprint(events) != "[start end:requested start]" {
		t.Fatalf("events %v, overlapping %v", events, bad)
	}
}

// TestRequestsOfAnEndedActivationSayTheyDidNotRun: a request queued for an
// activation that ends, whose agent then cannot be activated again, fails
// saying it did not run (and with the activation's error).
func TestRequestsOfAnEndedActivationSayTheyDidNotRun(t *testing.T) {
	inDeactivate := make(chan struct{})
	finishDeactivate := make(chan struct{})
	var made atomic.Int32
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"H": func(h Host) (Agent, error) {
			if made.Add(1) > 1 {
				return nil, errs.New(codes.FailedPrecondition, "no second activation")
			}
			return &funcAgent{
				onDeactivate: func(context.Context, Reason) {
					close(inDeactivate)
					<-finishDeactivate
				},
				onMessage: func(_ context.Context, m *Message) (*Message, error) {
					h.Deactivate()
					return nil, nil
				},
			}, nil
		},
	})
	if err := rt.Send(t.Context(), &Message{From: "Session:a:s", To: "H:a:h", Message: "quit"}); err != nil {
		t.Fatal(err)
	}
	<-inDeactivate
	done := make(chan error, 1)
	go func() {
		_, err := ask(t, rt, "H:a:h", "late")
		done <- err
	}()
	h := rt.dir.get("H:a:h")
	waitUntil(t, "the request queued for the ending activation", func() bool { return h.mb.UserMessageCount() == 1 })
	close(finishDeactivate)
	err := <-done
	wantCode(t, err, codes.FailedPrecondition, "agent H:a:h could not be activated again (the request did not run)")
	if !strings.Contains(err.Error(), "no second activation") {
		t.Errorf("error %q does not carry the activation's error", err)
	}
}
