package grain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// funcAgent adapts functions to the agent interfaces.
type funcAgent struct {
	onMessage    func(ctx context.Context, m *Message) (*Message, error)
	onEvent      func(ctx context.Context, m *Message) error
	onActivate   func(ctx context.Context) error
	onDeactivate func(ctx context.Context, r Reason)
}

func (f *funcAgent) OnMessage(ctx context.Context, m *Message) (*Message, error) {
	return f.onMessage(ctx, m)
}

func (f *funcAgent) OnEvent(ctx context.Context, m *Message) error {
	if f.onEvent == nil {
		return nil
	}
	return f.onEvent(ctx, m)
}

func (f *funcAgent) OnActivate(ctx context.Context) error {
	if f.onActivate == nil {
		return nil
	}
	return f.onActivate(ctx)
}

func (f *funcAgent) OnDeactivate(ctx context.Context, r Reason) {
	if f.onDeactivate != nil {
		f.onDeactivate(ctx, r)
	}
}

func reply(m *Message, text string) (*Message, error) {
	r := m.Response()
	r.Message = text
	return r, nil
}

// newRuntime starts a runtime with the given types and closes it at the end
// of the test.
func newRuntime(t *testing.T, cfg Config, types map[string]Factory) *Runtime {
	t.Helper()
	reg := NewRegistry()
	for name, f := range types {
		if err := reg.Register(name, f); err != nil {
			t.Fatal(err)
		}
	}
	return startRuntime(t, cfg, reg)
}

// startRuntime starts a runtime for reg and closes it at the end of the test.
func startRuntime(t *testing.T, cfg Config, reg *Registry) *Runtime {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // tests panic on purpose
	}
	rt, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

func echoFactory(Host) (Agent, error) {
	return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) { return reply(m, m.Message) }}, nil
}

func ask(t *testing.T, rt *Runtime, to, text string) (*Message, error) {
	t.Helper()
	return rt.Ask(t.Context(), &Message{From: "Session:tester:s1", To: to, Message: text})
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if got := errs.Code(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func TestAskRelativeAndReply(t *testing.T) {
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{"Echo": echoFactory})
	r, err := ask(t, rt, "Echo:one", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "hello" || r.Kind != KindResponse || r.From != "Echo:tester:one" || r.To != "Session:tester:s1" || r.CorrelationID == "" {
		t.Fatalf("reply %v", r)
	}
	if got := rt.Activations("Echo"); len(got) != 1 || got[0].Address.String() != "Echo:tester:one" {
		t.Fatalf("Activations = %v", got)
	}
}

func TestBadInput(t *testing.T) {
	rt := newRuntime(t, Config{
		Silo: "t", MailboxSize: 10, AskTimeout: time.Minute, IdleTimeout: time.Hour,
		DeactivateTimeout: time.Second, MaxMessageSize: 4096,
	}, map[string]Factory{"Echo": echoFactory})
	_, err := ask(t, rt, "Nope:a:b", "x")
	wantCode(t, err, codes.NotFound, `"Nope" is not registered`)
	_, err = ask(t, rt, "Echo:a:b:c", "x")
	wantCode(t, err, codes.InvalidArgument, "too many colons")
	_, err = ask(t, rt, "Echo:a b", "x")
	wantCode(t, err, codes.InvalidArgument, "bad alias")
	_, err = rt.Ask(t.Context(), &Message{From: "Session:tester:s1", To: "Echo:a:b", MessageType: "_silo.stop"})
	wantCode(t, err, codes.InvalidArgument, "reserved")
	_, err = ask(t, rt, "Echo:a:b", strings.Repeat("x", 5000))
	wantCode(t, err, codes.ResourceExhausted, "exceeds the maximum of 4096")
	_, err = rt.Ask(t.Context(), &Message{To: "Echo:rel"})
	wantCode(t, err, codes.InvalidArgument, "relative")
	if _, err := ask(t, rt, "Echo:a:b", "still serving"); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerErrorsAndPanics(t *testing.T) {
	var activations atomic.Int32
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Fragile": func(Host) (Agent, error) {
			activations.Add(1)
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				switch m.Message {
				case "panic":
					panic("boom")
				case "notfound":
					return nil, errs.New(codes.NotFound, "no such ticket")
				case "plain":
					return nil, errors.New("plain failure")
				case "passon":
					// An error of a call of its own that was not run.
					return nil, errShuttingDown
				}
				return reply(m, "ok")
			}}, nil
		},
		"Echo": echoFactory,
	})
	if _, err := ask(t, rt, "Echo:a:other", "x"); err != nil {
		t.Fatal(err)
	}
	_, err := ask(t, rt, "Fragile:a:b", "panic")
	wantCode(t, err, codes.Internal, "panicked: boom")
	_, err = ask(t, rt, "Fragile:a:b", "notfound")
	wantCode(t, err, codes.NotFound, "no such ticket")
	_, err = ask(t, rt, "Fragile:a:b", "plain")
	wantCode(t, err, codes.Unknown, "plain failure")
	// The handler ran: what it passes on of a refusal must not say that
	// its own message was not run.
	_, err = ask(t, rt, "Fragile:a:b", "passon")
	wantCode(t, err, codes.Unavailable, "the turn of Fragile:a:b ran and failed on a call of its own: silo is shutting down")
	if errors.Is(err, ErrNotRun) {
		t.Errorf("a handler's error %v is ErrNotRun: its message ran", err)
	}
	if _, err := ask(t, rt, "Fragile:a:b", "fine"); err != nil {
		t.Fatal(err)
	}
	// The panic ended the first activation; the next message made a new one.
	if got := activations.Load(); got != 2 {
		t.Fatalf("activations = %d, want 2", got)
	}
	if _, err := ask(t, rt, "Echo:a:other", "x"); err != nil {
		t.Fatal(err)
	}
}

func TestAskDeadline(t *testing.T) {
	release := make(chan struct{})
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Slow": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				select {
				case <-release:
				case <-ctx.Done(): // the caller gave up: its context reaches the handler
				}
				return reply(m, "late")
			}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := rt.Ask(ctx, &Message{From: "Session:t:s", To: "Slow:a:b"})
	wantCode(t, err, codes.DeadlineExceeded, "deadline exceeded")
	close(release)
	if _, err := ask(t, rt, "Slow:a:b", "again"); err != nil {
		t.Fatal(err)
	}
}

// TestReentrancy: A asks B, B asks A (same call chain) completes, however
// deep the chain goes.
func TestReentrancy(t *testing.T) {
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Ping": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				n, _ := strconv.Atoi(m.Message)
				if n == 0 {
					return reply(m, "bottom:"+h.Address().Alias)
				}
				other := "Ping:a:x"
				if h.Address().Alias == "x" {
					other = "Ping:a:y"
				}
				r, err := h.Ask(ctx, other, Text(strconv.Itoa(n-1)))
				if err != nil {
					return nil, err
				}
				return reply(m, r.Message)
			}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := rt.Ask(ctx, &Message{From: "Session:a:s", To: "Ping:a:x", Message: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "bottom:y" {
		t.Fatalf("reply %q", r.Message)
	}
}

// TestOtherChainsWaitTheirTurn: while a turn waits in Ask, a request of
// another call chain does not enter.
func TestOtherChainsWaitTheirTurn(t *testing.T) {
	gate := make(chan struct{})
	var inside atomic.Int32
	var overlapped atomic.Bool
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Gate": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				<-gate
				return reply(m, "open")
			}}, nil
		},
		"Caller": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				if inside.Add(1) > 1 {
					overlapped.Store(true)
				}
				defer inside.Add(-1)
				if m.Message == "wait" {
					if _, err := h.Ask(ctx, "Gate:a:g", Text("")); err != nil {
						return nil, err
					}
				}
				return reply(m, m.Message)
			}}, nil
		},
	})
	first := make(chan error, 1)
	go func() {
		_, err := ask(t, rt, "Caller:a:c", "wait")
		first <- err
	}()
	// Wait until the first turn is parked in its Ask.
	for rt.activationFor(t, "Caller:a:c").waiters.Load() == 0 {
		waitABit()
	}
	second := make(chan error, 1)
	go func() {
		_, err := ask(t, rt, "Caller:a:c", "quick")
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("a request of another chain ran during the turn: %v", err)
	case <-ringDepth(rt, t, "Caller:a:c", 1):
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if overlapped.Load() {
		t.Fatal("two turns of one activation overlapped")
	}
}

// activationFor returns the live activation of key, activating it if needed.
func (rt *Runtime) activationFor(t *testing.T, key string) *activation {
	t.Helper()
	a, err := rt.activation(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ringDepth is closed once key's mailbox holds n messages.
func ringDepth(rt *Runtime, t *testing.T, key string, n int) <-chan struct{} {
	ch := make(chan struct{})
	a := rt.activationFor(t, key)
	go func() {
		for a.mb.UserMessageCount() < n {
			waitABit()
		}
		close(ch)
	}()
	return ch
}

// waitABit yields while polling a condition that another goroutine will make
// true; it is a poll interval, not a settling delay.
func waitABit() { time.Sleep(time.Millisecond) }

func TestBackpressureAndOrder(t *testing.T) {
	block := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	cfg := DefaultConfig()
	cfg.MailboxSize = 3
	rt := newRuntime(t, cfg, map[string]Factory{
		"Log": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				if m.Message == "block" {
					<-block
				}
				mu.Lock()
				seen = append(seen, m.Message)
				mu.Unlock()
				return nil, nil
			}}, nil
		},
	})
	send := func(ctx context.Context, text string) error {
		return rt.Send(ctx, &Message{From: "Session:a:s", To: "Log:a:l", Message: text})
	}
	if err := send(t.Context(), "block"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := send(t.Context(), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The mailbox is full: the next sender waits, bounded by its context.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	err := send(ctx, "over")
	cancel()
	wantCode(t, err, codes.DeadlineExceeded, "deadline")
	// A sender that waits long enough gets in once there is room.
	done := make(chan error, 1)
	go func() { done <- send(t.Context(), "3") }()
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 200; i++ {
		if err := send(t.Context(), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.Ask(t.Context(), &Message{From: "Session:a:s", To: "Log:a:l", Message: "end"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"block"}
	for i := 0; i < 200; i++ {
		want = append(want, strconv.Itoa(i))
	}
	want = append(want, "end")
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("seen %v\nwant %v", seen, want)
	}
}

// TestSingleActivation: many first messages at once make one activation.
// (The factory may run for spares that lose the race; they are discarded
// before they activate, so OnActivate runs once.)
func TestSingleActivation(t *testing.T) {
	var activated atomic.Int32
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"One": func(Host) (Agent, error) {
			return &funcAgent{
				onActivate: func(context.Context) error { activated.Add(1); return nil },
				onMessage:  func(_ context.Context, m *Message) (*Message, error) { return reply(m, "") },
			}, nil
		},
	})
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ask(t, rt, "One:a:b", "x"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := activated.Load(); got != 1 {
		t.Fatalf("OnActivate ran %d times, want 1", got)
	}
	if got := rt.Len(); got != 1 {
		t.Fatalf("%d live activations, want 1", got)
	}
}

func TestEventsAndBroadcast(t *testing.T) {
	var events sync.Map
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"Worker": func(h Host) (Agent, error) {
			return &funcAgent{
				onMessage: func(_ context.Context, m *Message) (*Message, error) { return reply(m, "ok") },
				onEvent: func(_ context.Context, m *Message) error {
					events.Store(h.Address().String(), m.Message)
					return nil
				},
			}, nil
		},
		"Boss": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				n, err := h.Broadcast(ctx, "Worker:acme:*", &Message{Kind: KindEvent, Message: "go"})
				if err != nil {
					return nil, err
				}
				return reply(m, strconv.Itoa(n))
			}}, nil
		},
	})
	for _, w := range []string{"Worker:acme:1", "Worker:acme:2", "Worker:other:3"} {
		if _, err := ask(t, rt, w, "wake"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := ask(t, rt, "Boss:acme:b", "")
	if err != nil || r.Message != "2" {
		t.Fatalf("broadcast reached %v, %v; want 2", r, err)
	}
	// An Ask queues behind the event, so after it the event was handled.
	for _, w := range []string{"Worker:acme:1", "Worker:acme:2"} {
		if _, err := ask(t, rt, w, "sync"); err != nil {
			t.Fatal(err)
		}
		if v, ok := events.Load(w); !ok || v != "go" {
			t.Fatalf("%s got event %v", w, v)
		}
	}
	if _, ok := events.Load("Worker:other:3"); ok {
		t.Fatal("broadcast reached an agent outside the pattern")
	}
}

// journal records activation lifetimes to check they never overlap.
func TestTimers(t *testing.T) {
	ticks := make(chan string, 100)
	var stopped atomic.Bool
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"T": func(h Host) (Agent, error) {
			n := 0
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				switch m.MessageType {
				case "start":
					return nil, h.RegisterTimer("t", time.Millisecond, time.Millisecond, "tick", "payload")
				case "tick":
					n++ // in turn: no lock needed
					ticks <- m.Message
					if n == 3 {
						stopped.Store(h.StopTimer("t"))
					}
				case "count":
					return reply(m, strconv.Itoa(n))
				}
				return nil, nil
			}}, nil
		},
	})
	if _, err := rt.Ask(t.Context(), &Message{From: "Session:a:s", To: "T:a:t", MessageType: "start"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if p := <-ticks; p != "payload" {
			t.Fatalf("tick carried %q", p)
		}
	}
	r, err := rt.Ask(t.Context(), &Message{From: "Session:a:s", To: "T:a:t", MessageType: "count"})
	if err != nil || r.Message != "3" || !stopped.Load() {
		t.Fatalf("count %v %v, stopped %v", r, err, stopped.Load())
	}
	if _, err := rt.Ask(t.Context(), &Message{From: "Session:a:s", To: "T:a:t", MessageType: "start"}); err != nil {
		t.Fatal(err)
	}
	<-ticks
	// Deactivation (here at Close) stops the timer; goleak checks no timer
	// goroutine is left behind.
}

func TestCloseDeactivatesAll(t *testing.T) {
	var j journal
	reg := NewRegistry()
	if err := reg.Register("C", journaled(&j, func(_ Host, _ context.Context, m *Message) (*Message, error) { return reply(m, "") })); err != nil {
		t.Fatal(err)
	}
	rt, err := New(DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := ask(t, rt, "C:a:"+strconv.Itoa(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	events, _ := j.snapshot()
	ends := 0
	for _, e := range events {
		if e == "end:shutdown" {
			ends++
		}
	}
	if ends != 50 {
		t.Fatalf("%d OnDeactivate(shutdown), want 50", ends)
	}
	_, err = ask(t, rt, "C:a:1", "")
	wantCode(t, err, codes.Unavailable, "shutting down")
	if !errors.Is(err, ErrNotRun) {
		t.Errorf("an Ask refused by a closed runtime failed with %v: want ErrNotRun (a forwarding silo sends it again)", err)
	}
}

// Configuration errors are InvalidArgument.
func TestConfigErrorsAreInvalidArgument(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.MailboxSize = 0 },
		func(c *Config) { c.AskTimeout = 0 },
		func(c *Config) { c.IdleTimeout = -time.Second },
		func(c *Config) { c.DeactivateTimeout = 0 },
		func(c *Config) { c.MaxMessageSize = 10 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("Validate(%+v) = %v, want InvalidArgument", cfg, err)
		}
		if _, err := New(cfg, NewRegistry()); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
	if _, err := New(DefaultConfig(), nil); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("New with a nil Registry = %v, want InvalidArgument", err)
	}
}

// memReminders records what a Host registers.
type memReminders struct {
	mu sync.Mutex
	rs map[string]Reminder
}

func (m *memReminders) Register(_ context.Context, a Address, r Reminder) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rs[a.String()+"/"+r.Name] = r
	return nil
}

func (m *memReminders) Unregister(context.Context, Address, string) error { return nil }

func (m *memReminders) List(context.Context, Address) ([]Reminder, error) { return nil, nil }

// RegisterReminder gives the service a first due time after due on the
// runtime's clock.
func TestRegisterReminderDue(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	rems := &memReminders{rs: map[string]Reminder{}}
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: clk})
	cfg.Reminders = rems
	rt := newRuntime(t, cfg, map[string]Factory{
		"R": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				due, err := time.ParseDuration(m.Message)
				if err != nil {
					return nil, err
				}
				return nil, h.RegisterReminder(ctx, "r"+m.Message, due, time.Minute, "tick", "payload")
			}}, nil
		},
	})
	for _, due := range []string{"0s", "10s"} {
		if _, err := ask(t, rt, "R:a:b", due); err != nil {
			t.Fatal(err)
		}
	}
	rems.mu.Lock()
	now, soon := rems.rs["R:a:b/r0s"], rems.rs["R:a:b/r10s"]
	rems.mu.Unlock()
	want := Reminder{Name: "r0s", Period: time.Minute, MessageType: "tick", Message: "payload", Due: clk.Now()}
	if now != want {
		t.Fatalf("due 0: registered %+v, want %+v", now, want)
	}
	if !soon.Due.Equal(clk.Now().Add(10 * time.Second)) {
		t.Fatalf("due 10s: first due %v, want %v", soon.Due, clk.Now().Add(10*time.Second))
	}
	_, err := ask(t, rt, "R:a:b", "-1s")
	wantCode(t, err, codes.InvalidArgument, "negative due time")

	noSvc := newRuntime(t, DefaultConfig(), map[string]Factory{
		"R": func(h Host) (Agent, error) {
			return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
				return nil, h.RegisterReminder(ctx, "r", 0, time.Minute, "tick", "")
			}}, nil
		},
	})
	_, err = ask(t, noSvc, "R:a:b", "")
	wantCode(t, err, codes.Unavailable, "not configured")
}
