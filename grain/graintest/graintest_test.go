package graintest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/internal/demoagents"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter keeps its count in the state store.
type counter struct{ n *grain.State[int] }

func newCounter(h grain.Host) (grain.Agent, error) { return &counter{n: grain.NewState[int](h)}, nil }

func (c *counter) OnActivate(ctx context.Context) error { return c.n.Load(ctx) }

func (c *counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Message == "inc" {
		if err := c.n.Update(ctx, func(n *int) error { *n++; return nil }); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = strconv.Itoa(c.n.Value)
	return r, nil
}

func TestStateAndIdempotencyKeys(t *testing.T) {
	env := graintest.New(t)
	env.Register("Counter", newCounter)
	ctx := t.Context()
	for i := 1; i <= 3; i++ {
		if got, err := env.AskText(ctx, "Counter:c", "inc"); err != nil || got != strconv.Itoa(i) {
			t.Fatalf("inc %d = %q, %v", i, got, err)
		}
	}
	if data, etag := env.State("Counter:c"); string(data) != "3" || etag == "" {
		t.Fatalf("stored %q at %q, want 3", data, etag)
	}
	// A keyed request answered twice runs once.
	for range 2 {
		r, err := env.Ask(ctx, "Counter:c", &grain.Message{Message: "inc", IdempotencyKey: "k1"})
		if err != nil || r.Message != "4" {
			t.Fatalf("keyed inc = %v, %v", r, err)
		}
	}
	if data, _ := env.State("Counter:tester:c"); string(data) != "4" {
		t.Fatalf("stored %q after a keyed request sent twice, want 4", data)
	}
}

func TestRemindersOnTheEnvClock(t *testing.T) {
	env2 := graintest.New(t)
	if err := demoagents.Register(env2.Registry); err != nil { // the demo Ticker among them
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := env2.AskText(ctx, "Ticker:t", "start 1m"); err != nil {
		t.Fatal(err)
	}
	if rs := env2.Reminders("Ticker:t"); len(rs) != 1 || rs[0].Name != demoagents.TickerReminder || rs[0].Period != time.Minute {
		t.Fatalf("reminders %v", rs)
	}
	env2.Advance(59 * time.Second)
	if got, _ := env2.AskText(ctx, "Ticker:t", "count"); got != "0" {
		t.Fatalf("count before the first period = %q, want 0", got)
	}
	env2.Advance(time.Second)
	if got, _ := env2.AskText(ctx, "Ticker:t", "count"); got != "1" {
		t.Fatalf("count after a period = %q, want 1", got)
	}
	env2.Advance(10 * time.Minute)
	if got, _ := env2.AskText(ctx, "Ticker:t", "count"); got != "11" {
		t.Fatalf("count after 11 periods = %q, want 11", got)
	}
	if n := env2.Ticks("Ticker:t", demoagents.TickerReminder); n != 11 {
		t.Fatalf("ticks %d, want 11", n)
	}
	if _, err := env2.AskText(ctx, "Ticker:t", "stop"); err != nil {
		t.Fatal(err)
	}
	// The reminder is gone, and an hour later nothing fired. (The count is
	// the activation's, which an hour idle may have ended.)
	if rs := env2.Reminders("Ticker:t"); len(rs) != 0 {
		t.Fatalf("reminders after stop %v", rs)
	}
	env2.Advance(time.Hour)
	if n := env2.Ticks("Ticker:t", demoagents.TickerReminder); n != 0 {
		t.Fatalf("ticks of the removed reminder %d, want none", n)
	}
}

// alarm sets a timer and counts its firings.
type alarm struct {
	h     grain.Host
	fired atomic.Int32
}

func (a *alarm) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	switch {
	case m.MessageType == "ring":
		a.fired.Add(1)
		return nil, nil
	case m.Message == "set":
		if err := a.h.RegisterTimer("ring", 30*time.Second, 0, "ring", ""); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = strconv.Itoa(int(a.fired.Load()))
	return r, nil
}

func TestTimersOnTheEnvClock(t *testing.T) {
	env := graintest.New(t)
	env.Register("Alarm", func(h grain.Host) (grain.Agent, error) { return &alarm{h: h}, nil })
	ctx := t.Context()
	start := env.Now()
	if _, err := env.AskText(ctx, "Alarm:a", "set"); err != nil {
		t.Fatal(err)
	}
	if due := env.Due(); len(due) == 0 || !containsTime(due, start.Add(30*time.Second)) {
		t.Fatalf("due times %v, want one at %v", due, start.Add(30*time.Second))
	}
	env.Advance(29 * time.Second)
	if got, _ := env.AskText(ctx, "Alarm:a", "get"); got != "0" {
		t.Fatalf("fired %s times before its time", got)
	}
	env.Advance(time.Second)
	if got, _ := env.AskText(ctx, "Alarm:a", "get"); got != "1" {
		t.Fatalf("fired %s times at its time, want 1", got)
	}
}

func containsTime(ts []time.Time, t time.Time) bool {
	for _, x := range ts {
		if x.Equal(t) {
			return true
		}
	}
	return false
}

// front asks Backend, a neighbour the test stubs.
type front struct{ h grain.Host }

func (f *front) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r, err := f.h.Ask(ctx, "Backend:b", &grain.Message{Message: strings.ToUpper(m.Message)})
	if err != nil {
		return nil, err
	}
	out := m.Response()
	out.Message = "front: " + r.Message
	return out, nil
}

func TestStubbedNeighbour(t *testing.T) {
	env := graintest.New(t)
	env.Register("Front", func(h grain.Host) (grain.Agent, error) { return &front{h: h}, nil })
	var asked []string
	env.Stub("Backend", func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
		asked = append(asked, m.From+" "+m.Message)
		if m.Message == "FAIL" {
			return nil, errs.New(codes.Unavailable, "backend down")
		}
		r := m.Response()
		r.Message = "backend got " + m.Message
		return r, nil
	})
	got, err := env.AskText(t.Context(), "Front:f", "hi")
	if err != nil || got != "front: backend got HI" {
		t.Fatalf("ask = %q, %v", got, err)
	}
	if len(asked) != 1 || asked[0] != "Front:tester:f HI" {
		t.Fatalf("the stub was asked %q", asked)
	}
	_, err = env.AskText(t.Context(), "Front:f", "fail")
	if errs.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "backend down") {
		t.Fatalf("a failing neighbour: %v", err)
	}
}

// sink subscribes to orders.# and keeps what it gets; "poison" is refused
// for good, "flaky" fails twice first.
type sink struct {
	h     grain.Host
	got   []string
	flaky int
}

func (s *sink) OnActivate(ctx context.Context) error {
	return s.h.Subscribe(ctx, "sink", "orders.#", grain.WithMaxAttempts(3))
}

func (s *sink) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic == "" {
		r := m.Response()
		r.Message = strings.Join(s.got, ",")
		return r, nil
	}
	switch m.Message {
	case "poison":
		return nil, grain.Poison("never")
	case "flaky":
		if s.flaky++; s.flaky < 3 {
			return nil, errs.New(codes.Unavailable, "not yet")
		}
	}
	s.got = append(s.got, fmt.Sprintf("%s@%d", m.Message, m.Attempt))
	return m.Response(), nil
}

func TestTopics(t *testing.T) {
	env := graintest.New(t)
	env.Register("Sink", func(h grain.Host) (grain.Agent, error) { return &sink{h: h}, nil })
	ctx := t.Context()
	if _, err := env.AskText(ctx, "Sink:s", ""); err != nil { // activates it: it subscribes
		t.Fatal(err)
	}
	for _, text := range []string{"a", "poison", "flaky", "b"} {
		if _, err := env.Publish(ctx, "orders.eu", &grain.Message{Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Publish(ctx, "invoices.eu", &grain.Message{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Publish(ctx, "bad topic!", nil); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad topic: %v, want InvalidArgument", err)
	}
	n, err := env.Deliver(ctx)
	if err != nil || n != 6 { // a, poison, b, and flaky three times
		t.Fatalf("Deliver = %d, %v; want 6 deliveries", n, err)
	}
	if got, _ := env.AskText(ctx, "Sink:s", ""); got != "a@1,b@1,flaky@3" {
		t.Fatalf("the sink got %q", got)
	}
	if dl := env.DeadLetters(); len(dl) != 1 || dl[0].Message.Message != "poison" {
		t.Fatalf("dead letters %v", dl)
	}
	if ps := env.Published("tester:orders.eu"); len(ps) != 4 {
		t.Fatalf("published to orders.eu: %d, want 4", len(ps))
	}
}

// elsewhere pushes to a session that is not the test's.
type elsewhere struct{ h grain.Host }

func (e elsewhere) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return nil, e.h.Send(ctx, "Session:bob:s", &grain.Message{Message: "hi"})
}

// What an agent pushes to its caller, the test's session, is kept
// (Pushed), in order, before the reply; a push to another session is
// NotFound to its sender.
func TestPushedToTheTestSession(t *testing.T) {
	env := graintest.New(t)
	if err := demoagents.Register(env.Registry); err != nil { // Progress: three pushes, then the reply
		t.Fatal(err)
	}
	env.Register("Elsewhere", func(h grain.Host) (grain.Agent, error) { return elsewhere{h}, nil })
	ctx := t.Context()
	if got, err := env.AskText(ctx, "Progress:p", "plan"); err != nil || got != `done: plan` {
		t.Fatalf("Progress = %q, %v", got, err)
	}
	pushed := env.Pushed()
	if len(pushed) != 3 {
		t.Fatalf("pushed %v, want three messages", pushed)
	}
	for i, m := range pushed {
		if want := fmt.Sprintf("thinking %d/3 about %q", i+1, "plan"); m.Message != want || m.From != "Progress:tester:p" || m.To != "Session:tester:graintest" || m.Kind != grain.KindOneWay {
			t.Errorf("push %d: %v, want %q from Progress:tester:p to the test's session", i, m, want)
		}
	}
	if _, err := env.AskText(ctx, "Elsewhere:e", "go"); errs.Code(err) != codes.NotFound {
		t.Fatalf("a push to another session: %v, want NotFound", err)
	}
	if n := len(env.Pushed()); n != 3 {
		t.Errorf("%d pushes kept, want 3", n)
	}
}

// batchSink takes topic messages in batches: "later" is left for the next
// batch the first time, "poison" refused for good; single deliveries go
// to OnMessage.
type batchSink struct {
	h       grain.Host
	got     []string
	sizes   []int
	stalled bool
	stall   bool // handles nothing, ever
}

func (s *batchSink) OnActivate(ctx context.Context) error {
	return s.h.Subscribe(ctx, "sink", "orders.#")
}

func (s *batchSink) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic != "" {
		s.got = append(s.got, fmt.Sprintf("%s@%d one", m.Message, m.Attempt))
	}
	r := m.Response()
	r.Message = strings.Join(s.got, ",")
	return r, nil
}

func (s *batchSink) OnMessages(ctx context.Context, ms []*grain.Message) (int, error) {
	s.sizes = append(s.sizes, len(ms))
	if s.stall {
		return 0, nil
	}
	for i, m := range ms {
		if m.Subscription != "tester:sink" || m.Topic != "tester:orders.eu" {
			return i, fmt.Errorf("delivery of %s by %s", m.Topic, m.Subscription)
		}
		switch {
		case m.Message == "poison":
			return i, grain.Poison("never")
		case m.Message == "later" && !s.stalled:
			s.stalled = true
			return i, nil
		}
		s.got = append(s.got, fmt.Sprintf("%s@%d", m.Message, m.Attempt))
	}
	return len(ms), nil
}

// WithDeliveryBatch: Deliver hands a batch handler several messages in one
// request, settled by position, as a silo does.
func TestBatchDelivery(t *testing.T) {
	env := graintest.New(t, graintest.WithDeliveryBatch(4))
	var agent *batchSink
	env.Register("Sink", func(h grain.Host) (grain.Agent, error) { agent = &batchSink{h: h}; return agent, nil })
	ctx := t.Context()
	if _, err := env.AskText(ctx, "Sink:s", ""); err != nil { // activates it: it subscribes
		t.Fatal(err)
	}
	for _, text := range []string{"a", "b", "later", "c", "poison", "d"} {
		if _, err := env.Publish(ctx, "orders.eu", &grain.Message{Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	// [a b later c]: two handled; [later c poison d]: poison refused after
	// two; [d] alone, to OnMessage.
	n, err := env.Deliver(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Deliver = %d, %v; want 3 deliveries", n, err)
	}
	if got, _ := env.AskText(ctx, "Sink:s", ""); got != "a@1,b@1,later@1,c@1,d@1 one" {
		t.Fatalf("the sink got %q", got)
	}
	if fmt.Sprint(agent.sizes) != "[4 4]" {
		t.Fatalf("batches of %v", agent.sizes)
	}
	if dl := env.DeadLetters(); len(dl) != 1 || dl[0].Message.Message != "poison" {
		t.Fatalf("dead letters %v", dl)
	}
	// A handler that handles none of its batch, without an error, would
	// get it again without end.
	agent.stall = true
	for _, text := range []string{"e", "f"} {
		if _, err := env.Publish(ctx, "orders.eu", &grain.Message{Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Deliver(ctx); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a stalled batch: %v, want FailedPrecondition", err)
	}
}
