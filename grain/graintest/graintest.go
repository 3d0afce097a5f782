package graintest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// Env is a runtime for tests: the agents registered in it run as on a
// silo (one turn at a time, state with etags, timers, reminders, topics,
// Asks between agents, the idempotency keys), in memory, on a clock that
// moves only when the test calls Advance. Its methods may be called from
// any goroutine, but Advance and Deliver from one at a time.
type Env struct {
	t testing.TB

	// Registry is where the test registers its agent types (see Register
	// and Stub).
	Registry *grain.Registry
	// Runtime runs the agents.
	Runtime *grain.Runtime
	// StateStore keeps the agents' state.
	StateStore *grain.MemoryStateStore

	clock     *fakeClock
	reminders *reminderService
	topics    *topicService
	session   *session
	from      string
}

// Option adjusts New.
type Option func(*options)

type options struct {
	start     time.Time
	principal string
	config    func(*grain.Config)
	batch     int
}

// WithStart sets the time the Env's clock starts at (default 2026-01-01
// 09:00 UTC, a Thursday).
func WithStart(t time.Time) Option { return func(o *options) { o.start = t } }

// WithPrincipal sets the owner of the test's own session, from which Ask,
// Send and Publish are sent, and so the owner of relative addresses
// (default "tester": Ask(ctx, "Echo:a", ...) asks Echo:tester:a).
func WithPrincipal(p string) Option { return func(o *options) { o.principal = p } }

// WithConfig lets the test change the runtime's configuration (its
// timeouts, an Authorizer) before it starts.
func WithConfig(f func(*grain.Config)) Option { return func(o *options) { o.config = f } }

// WithDeliveryBatch makes Deliver hand a subscriber up to n messages of a
// subscription in one request, as a silo does with
// --topic-delivery-batch n: those queued at once, in their order, to the
// agent's OnMessages (see grain.BatchHandler), or, for an agent without
// it, to its OnMessage one after another in the same turn. They are
// settled by position, as on a silo: those handled are done, the first
// not handled has the outcome the handler gave it, and those after it
// come again, next. Default 1: one message per request.
func WithDeliveryBatch(n int) Option { return func(o *options) { o.batch = n } }

// New returns an Env whose runtime is closed when the test ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := options{start: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC), principal: "tester", batch: 1}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Env{t: t, Registry: grain.NewRegistry(), StateStore: grain.NewMemoryStateStore(), clock: newFakeClock(o.start)}
	e.reminders = &reminderService{env: e}
	e.topics = &topicService{env: e, batch: max(o.batch, 1)}
	e.from = grain.SessionType + ":" + o.principal + ":graintest"
	e.session = &session{addr: e.from}
	cfg := grain.DefaultConfig()
	cfg.Silo = "graintest"
	cfg.State = e.StateStore
	cfg.Reminders = e.reminders
	cfg.Topics = e.topics
	if o.config != nil {
		o.config(&cfg)
	}
	siloapi.Wire(&cfg, siloapi.Wiring{Clock: e.clock, Sessions: e.session})
	rt, err := grain.New(cfg, e.Registry)
	if err != nil {
		t.Fatalf("graintest: %v", err)
	}
	e.Runtime = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("graintest: close the runtime: %v", err)
		}
	})
	return e
}

// Register registers an agent type, as a silo's program does; it fails the
// test if the registry refuses it.
func (e *Env) Register(typeName string, f grain.Factory, info ...grain.TypeInfo) {
	e.t.Helper()
	if err := e.Registry.Register(typeName, f, info...); err != nil {
		e.t.Fatalf("graintest: register %s: %v", typeName, err)
	}
}

// Stub registers typeName as an agent that answers every request with
// handle (and passes one-way messages and events to it, ignoring its
// reply): a neighbour of the agent under test, stubbed. info, if given,
// declares its skills (and their schemas, which callers' arguments are
// then checked against).
func (e *Env) Stub(typeName string, handle func(ctx context.Context, m *grain.Message) (*grain.Message, error), info ...grain.TypeInfo) {
	e.t.Helper()
	e.Register(typeName, func(grain.Host) (grain.Agent, error) { return stub(handle), nil }, info...)
}

type stub func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (s stub) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return s(ctx, m)
}

func (s stub) OnEvent(ctx context.Context, m *grain.Message) error {
	_, err := s(ctx, m)
	return err
}

// Ask sends msg to the agent at to (relative to the test's principal, see
// WithPrincipal) and returns its reply. A nil msg is an empty message.
func (e *Env) Ask(ctx context.Context, to string, msg *grain.Message) (*grain.Message, error) {
	if msg == nil {
		msg = &grain.Message{}
	}
	msg.To = to
	if msg.From == "" {
		msg.From = e.from
	}
	return e.Runtime.Ask(ctx, msg)
}

// AskText asks the agent at to with text and returns its reply's text.
func (e *Env) AskText(ctx context.Context, to, text string) (string, error) {
	r, err := e.Ask(ctx, to, &grain.Message{Message: text})
	if err != nil {
		return "", err
	}
	return r.Message, nil
}

// Send sends msg one way to the agent at to; with msg.Kind KindEvent, as
// an event.
func (e *Env) Send(ctx context.Context, to string, msg *grain.Message) error {
	if msg == nil {
		msg = &grain.Message{}
	}
	msg.To = to
	if msg.From == "" {
		msg.From = e.from
	}
	return e.Runtime.Send(ctx, msg)
}

// Pushed returns what agents sent to the test's own session, from which
// Ask, Send and Publish go, oldest first: the one-way messages and events
// an agent pushes to its caller while it works (a model agent's progress
// and streamed text, for one). A message to any other client session is
// NotFound to its sender, as a session no client holds is on a silo.
func (e *Env) Pushed() []*grain.Message { return e.session.messages() }

// Now is the Env's time.
func (e *Env) Now() time.Time { return e.clock.Now() }

// Advance moves the Env's clock on by d. Every timer and reminder that
// comes due meanwhile fires, in order, before Advance returns: each tick
// is then queued in its agent's mailbox, so a request sent to that agent
// afterwards is handled after the tick.
func (e *Env) Advance(d time.Duration) {
	if d < 0 {
		e.t.Fatalf("graintest: Advance(%v): time does not go back", d)
	}
	e.clock.advance(d)
}

// Due returns the times at which the timers and reminders set now (the
// runtime's own among them) come due, earliest first.
func (e *Env) Due() []time.Time { return e.clock.pending() }

// Reminders returns the reminders of the agent at addr (absolute, or
// relative to the test's principal), by name.
func (e *Env) Reminders(addr string) []grain.Reminder {
	e.t.Helper()
	a := e.address(addr)
	rs, _ := e.reminders.List(context.Background(), a)
	return rs
}

// Ticks returns how many times the reminder name of addr has fired.
func (e *Env) Ticks(addr, name string) int {
	e.t.Helper()
	a := e.address(addr)
	e.reminders.mu.Lock()
	defer e.reminders.mu.Unlock()
	if rem := e.reminders.all[a][name]; rem != nil {
		return rem.ticks
	}
	return 0
}

// State returns the stored state of the agent at addr and its etag ("" if
// it has none).
func (e *Env) State(addr string) (data []byte, etag string) {
	e.t.Helper()
	data, etag, err := e.StateStore.Load(context.Background(), e.address(addr))
	if err != nil {
		e.t.Fatalf("graintest: state of %s: %v", addr, err)
	}
	return data, etag
}

// Publish publishes msg to topic from the test's session, as a client
// would.
func (e *Env) Publish(ctx context.Context, topic string, msg *grain.Message) (string, error) {
	if msg == nil {
		msg = &grain.Message{}
	}
	return e.topics.Publish(ctx, e.from, topic, msg)
}

// Deliver hands every message published to a topic so far to the
// subscriptions it matches, as a silo's topics do (a REQUEST to the
// subscriber with Topic, Subscription and Attempt set; an error is tried again, up to
// the subscription's attempts, then the message is a dead letter), and
// what those deliveries publish in turn, until nothing is left to
// deliver. Retries come at once (a grain.Retry's wait and the backoff are
// not kept). It returns how many deliveries it made (a batch, see
// WithDeliveryBatch, is one). A batch handler that handles none of its
// batch and gives no error would get it again without end: Deliver then
// fails with FailedPrecondition.
func (e *Env) Deliver(ctx context.Context) (int, error) { return e.topics.deliver(ctx) }

// Published returns what was published to topic (owner:name; "" for every
// topic), oldest first.
func (e *Env) Published(topic string) []Published {
	e.topics.mu.Lock()
	defer e.topics.mu.Unlock()
	var out []Published
	for _, p := range e.topics.published {
		if topic == "" || p.Topic == topic {
			out = append(out, p)
		}
	}
	return out
}

// DeadLetters returns the messages that exhausted their deliveries, or
// that a subscriber declared poison (grain.Poison).
func (e *Env) DeadLetters() []Published {
	e.topics.mu.Lock()
	defer e.topics.mu.Unlock()
	return slices.Clone(e.topics.dead)
}

// address resolves addr against the test's principal, failing the test if
// it is not an agent address.
func (e *Env) address(addr string) grain.Address {
	e.t.Helper()
	a, err := grain.Resolve(addr, ownerOf(e.from))
	if err != nil {
		e.t.Fatalf("graintest: %v", err)
	}
	return a
}
