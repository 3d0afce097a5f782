package topics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// agents stands for the runtime: it records every delivery and answers
// with handle (nil: acknowledge).
type agents struct {
	mu     sync.Mutex
	got    []*grain.Message
	handle func(m *grain.Message) error
	change chan struct{}
}

func newAgents() *agents { return &agents{change: make(chan struct{})} }

func (a *agents) deliver(_ context.Context, m *grain.Message) (*grain.Message, error) {
	a.mu.Lock()
	a.got = append(a.got, m)
	h := a.handle
	close(a.change)
	a.change = make(chan struct{})
	a.mu.Unlock()
	if h != nil {
		if err := h(m); err != nil {
			return nil, err
		}
	}
	return m.Response(), nil
}

// wait waits until cond holds for the deliveries so far.
func (a *agents) wait(t *testing.T, what string, cond func(got []*grain.Message) bool) []*grain.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		a.mu.Lock()
		got, ch := append([]*grain.Message(nil), a.got...), a.change
		a.mu.Unlock()
		if cond(got) {
			return got
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s; %d deliveries", what, len(got))
		}
	}
}

type harness struct {
	t     *testing.T
	store topicstore.Store
	clk   *clock.Fake
	a     *agents
}

// newHarness makes a harness on store; nil is a memStore on the
// harness's fake clock.
func newHarness(t *testing.T, store topicstore.Store) *harness {
	h := &harness{t: t, store: store, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), a: newAgents()}
	if store == nil {
		h.store = topicstore.NewMemory(h.clk, 0)
	}
	return h
}

func (h *harness) service(mod func(*Config)) *Service {
	h.t.Helper()
	// One message a delivery: agents stands for the runtime, which alone
	// unpacks batches (they are tested with a runtime in grain and cluster).
	cfg := Config{store: h.store, clk: h.clk, MaxBacklog: 100, RetryMin: time.Second, RetryMax: 8 * time.Second, MaxDeliveryBatch: 1}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			h.t.Errorf("close: %v", err)
		}
	})
	<-s.Loaded()
	s.Start(h.a.deliver)
	return s
}

func addr(s string) grain.Address {
	a, err := grain.ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

func (h *harness) subscribe(s *Service, agent, name, pattern string, maxAttempts int) {
	h.t.Helper()
	if err := s.Subscribe(h.t.Context(), addr(agent), name, pattern, maxAttempts); err != nil {
		h.t.Fatalf("subscribe %s %s %s: %v", agent, name, pattern, err)
	}
}

func (h *harness) publish(s *Service, from, topic, text string) string {
	h.t.Helper()
	id, err := s.Publish(h.t.Context(), from, topic, &grain.Message{Message: text})
	if err != nil {
		h.t.Fatalf("publish %s: %v", topic, err)
	}
	return id
}

// Each subscription gets a copy; the members of one compete; a publisher's
// messages arrive in order, each acknowledged once.
func TestFanOutCompeteOrder(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	s := h.service(nil)
	h.subscribe(s, "Audit:acme:a", "audit", "acme:orders.#", 0)
	h.subscribe(s, "Worker:acme:w1", "work", "orders.*", 0)
	h.subscribe(s, "Worker:acme:w2", "work", "orders.*", 0)
	h.subscribe(s, "Worker:acme:w3", "other", "orders.created.eu", 0)
	const n = 40
	for i := range n {
		h.publish(s, "Shop:acme:shop", "orders.created", fmt.Sprint(i))
	}
	h.publish(s, "Shop:acme:shop", "orders.created.eu", "eu")
	got := h.a.wait(t, "every copy", func(got []*grain.Message) bool { return len(got) >= 2*n+2 })
	bySub := map[string][]*grain.Message{}
	members := map[string]bool{}
	for _, m := range got {
		bySub[m.Subscription] = append(bySub[m.Subscription], m)
		if m.Subscription == "acme:work" {
			members[m.To] = true
		}
		if m.Topic == "" || m.Attempt != 1 || m.From != "Shop:acme:shop" || m.Kind != grain.KindRequest {
			t.Errorf("delivery %v: want topic, attempt 1, from the publisher, a request", m)
		}
	}
	if len(bySub["acme:audit"]) != n+1 || len(bySub["acme:work"]) != n || len(bySub["acme:other"]) != 1 {
		t.Fatalf("copies per subscription: audit %d, work %d, other %d", len(bySub["acme:audit"]), len(bySub["acme:work"]), len(bySub["acme:other"]))
	}
	for _, sub := range []string{"acme:audit", "acme:work"} {
		ms := bySub[sub]
		for i := range n {
			if ms[i].Message != fmt.Sprint(i) {
				t.Fatalf("%s: delivery %d is %q: out of order", sub, i, ms[i].Message)
			}
		}
	}
	if !members["Worker:acme:w1"] || !members["Worker:acme:w2"] {
		t.Errorf("competing consumers: only %v got messages", members)
	}
	waitStats(t, s, "acks", func(st Stats) bool { return st.Acked == 2*n+2 })
}

func waitStats(t *testing.T, s *Service, what string, cond func(Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond(s.Stats()) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %+v", what, s.Stats())
		}
	}
}

// Retry then ack: the attempt number counts up, the backoff waits on the
// clock, and the lane waits for its head.
func TestRetryThenAck(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	h.a.handle = func(m *grain.Message) error {
		switch {
		case m.Message == "flaky" && m.Attempt < 3:
			return errors.New("not yet")
		case m.Message == "later" && m.Attempt < 2:
			return grain.Retry(5*time.Second, "busy")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "Worker:acme:w", "work", "jobs", 0)
	h.publish(s, "P:acme:p", "jobs", "flaky")
	h.publish(s, "P:acme:p", "jobs", "after") // same publisher: waits for flaky
	h.publish(s, "P:acme:q", "jobs", "later")
	h.a.wait(t, "first attempts", func(got []*grain.Message) bool { return len(got) >= 2 })
	waitStats(t, s, "two failures", func(st Stats) bool { return st.Failed+st.Retried == 2 })
	for _, m := range h.a.wait(t, "", func([]*grain.Message) bool { return true }) {
		if m.Message == "after" {
			t.Fatal("a publisher's second message overtook its first, which is being retried")
		}
	}
	h.clk.Advance(10 * time.Second) // past both backoffs (1 s ±20 %, 5 s)
	waitStats(t, s, "third failure", func(st Stats) bool { return st.Failed == 2 && st.Acked == 1 })
	h.clk.Advance(10 * time.Second)
	got := h.a.wait(t, "all acked", func(got []*grain.Message) bool { return len(got) == 6 })
	waitStats(t, s, "acks", func(st Stats) bool { return st.Acked == 3 })
	var flaky []uint32
	for _, m := range got {
		if m.Message == "flaky" {
			flaky = append(flaky, m.Attempt)
		}
	}
	if fmt.Sprint(flaky) != "[1 2 3]" {
		t.Errorf("flaky's attempts: %v", flaky)
	}
	if got[len(got)-1].Message != "after" {
		t.Errorf("last delivery %q, want after", got[len(got)-1].Message)
	}
}

// Poison becomes a dead letter at once, with its reason; exhausted
// attempts become one with the last error; replay delivers again from
// attempt 1; drop removes.
func TestDeadLetters(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	var mu sync.Mutex
	healed := false
	h.a.handle = func(m *grain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case healed:
			return nil
		case m.Message == "bad":
			return grain.Poison("cannot parse")
		case m.Message == "down":
			return errors.New("backend down")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "Worker:acme:w", "work", "jobs", 2)
	bad := h.publish(s, "P:acme:p", "jobs", "bad")
	down := h.publish(s, "P:acme:q", "jobs", "down")
	waitStats(t, s, "first dead letter", func(st Stats) bool { return st.DeadLettered == 1 && st.Failed == 1 })
	h.clk.Advance(2 * time.Second)
	waitStats(t, s, "second dead letter", func(st Stats) bool { return st.DeadLettered == 2 })
	ds, more, err := s.DeadLetters(t.Context(), "acme:work", "", 0)
	if err != nil || more || len(ds) != 2 {
		t.Fatalf("dead letters: %v, %v, %v", ds, more, err)
	}
	byID := map[string]*DeadLetter{}
	for _, d := range ds {
		byID[d.Message.Id] = d
	}
	if d := byID[bad]; d == nil || d.Reason != "poison: cannot parse" || d.Attempts != 1 || d.Agent != "Worker:acme:w" {
		t.Errorf("poison dead letter: %v", d)
	}
	if d := byID[down]; d == nil || d.Reason != "attempts exhausted" || d.Attempts != 2 || d.LastError != "backend down" || d.Message.Message != "down" {
		t.Errorf("exhausted dead letter: %v", d)
	}
	if d := byID[bad]; d != nil {
		if n, err := s.Drop(t.Context(), "acme:work", []string{d.Id}); err != nil || n != 1 {
			t.Fatalf("drop: %d, %v", n, err)
		}
	}
	mu.Lock()
	healed = true
	mu.Unlock()
	before := len(h.a.wait(t, "", func([]*grain.Message) bool { return true }))
	if n, err := s.Replay(t.Context(), "acme:work", nil); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	got := h.a.wait(t, "the replay", func(got []*grain.Message) bool { return len(got) == before+1 })
	if m := got[before]; m.ID != down || m.Attempt != 1 {
		t.Errorf("replayed delivery: id %s attempt %d, want %s attempt 1", m.ID, m.Attempt, down)
	}
	waitStats(t, s, "the replay acked", func(st Stats) bool { return st.Acked == 1 })
	if ds, _, _ := s.DeadLetters(t.Context(), "acme:work", "", 0); len(ds) != 0 {
		t.Errorf("dead letters after replay and drop: %v", ds)
	}
}

// A full backlog makes publishers wait, and fail with ResourceExhausted at
// their deadline; acknowledging makes room.
func TestBacklogBound(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	release := make(chan struct{})
	h.a.handle = func(*grain.Message) error {
		<-release
		return nil
	}
	s := h.service(func(c *Config) { c.MaxBacklog = 10; c.MaxInflight = 1 })
	h.subscribe(s, "Worker:acme:w", "work", "jobs", 0)
	for i := range 10 {
		h.publish(s, "P:acme:p", "jobs", fmt.Sprint(i))
	}
	ctx := t.Context()
	if err := s.waitRegistry(ctx, func(r *topicstore.Registry) bool { return r.Subs["acme:work"].Full }); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := s.Publish(short, "P:acme:p", "jobs", &grain.Message{Message: "more"})
	cancel()
	if errs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("publish to a full backlog: %v, want ResourceExhausted", err)
	}
	if _, err := s.Publish(ctx, "P:acme:p", "other", &grain.Message{}); err != nil {
		t.Fatalf("a topic nobody full subscribes: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Publish(ctx, "P:acme:p", "jobs", &grain.Message{Message: "waits"})
		done <- err
	}()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("publish once there is room: %v", err)
	}
	waitStats(t, s, "all acked", func(st Stats) bool { return st.Acked == 11 })
}

func TestPublishValidation(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	s := h.service(func(c *Config) { c.MaxMessageSize = 1024 })
	ctx := t.Context()
	for _, tc := range []struct {
		from, topic string
		msg         *grain.Message
		code        codes.Code
	}{
		{"P:acme:p", "a..b", &grain.Message{}, codes.InvalidArgument},
		{"nobody", "a", &grain.Message{}, codes.InvalidArgument},
		{"P:acme:p", "a", nil, codes.InvalidArgument},
		{"P:acme:p", "a", &grain.Message{MessageType: "_silo.x"}, codes.InvalidArgument},
		{"P:acme:p", "a", &grain.Message{IdempotencyKey: "a/b"}, codes.InvalidArgument},
		{"P:acme:p", "a", &grain.Message{Data: make([]byte, 2000)}, codes.ResourceExhausted},
	} {
		if _, err := s.Publish(ctx, tc.from, tc.topic, tc.msg); errs.Code(err) != tc.code {
			t.Errorf("publish %s %s: %v, want %v", tc.from, tc.topic, err, tc.code)
		}
	}
	for _, tc := range []struct {
		agent, name, pattern string
		max                  int
	}{
		{"W:acme:w", "a:b", "x", 0},
		{"W:acme:w", "", "x", 0},
		{"W:acme:w", "n", "x..y", 0},
		{"W:acme:w", "n", "x", 101},
		{"Session:acme:s1", "n", "x", 0},
	} {
		if err := s.Subscribe(ctx, addr(tc.agent), tc.name, tc.pattern, tc.max); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("subscribe %v: %v, want InvalidArgument", tc, err)
		}
	}
	h.subscribe(s, "W:acme:w", "n", "x", 0)
	if err := s.Subscribe(ctx, addr("W:acme:v"), "n", "y", 0); errs.Code(err) != codes.FailedPrecondition {
		t.Errorf("subscribe to a subscription of another pattern: %v, want FailedPrecondition", err)
	}
	if err := s.Unsubscribe(ctx, addr("W:acme:v"), "n"); errs.Code(err) != codes.NotFound {
		t.Errorf("unsubscribe a non-member: %v, want NotFound", err)
	}
}

// Idempotency keys: a publish again with the key is a no-op, within a
// batch and across batches.
func TestIdempotentPublish(t *testing.T) {
	h := newHarness(t, nil)
	s := h.service(nil)
	h.subscribe(s, "W:acme:w", "n", "x", 0)
	ctx := t.Context()
	first, err := s.PublishMessage(ctx, "P:acme:p", "x", &grain.Message{IdempotencyKey: "k1"})
	if err != nil || first.Duplicate || first.Subscriptions != 1 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := s.PublishMessage(ctx, "P:acme:p", "x", &grain.Message{IdempotencyKey: "k1"})
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("again: %+v, %v; first %s", again, err, first.ID)
	}
	// A batch carrying the key twice: both are the first's duplicates.
	rs, fails := s.PublishBatch(ctx, "P:acme:p", []Publication{
		{Topic: "x", Message: &grain.Message{IdempotencyKey: "k1"}},
		{Topic: "x", Message: &grain.Message{IdempotencyKey: "k1"}},
	})
	for i, r := range rs {
		if fails[i] != nil || !r.Duplicate || r.ID != first.ID {
			t.Fatalf("batch %d: %+v, %v; first %s", i, r, fails[i], first.ID)
		}
	}
	other, err := s.PublishMessage(ctx, "P:bob:p", "acme:x", &grain.Message{IdempotencyKey: "k1"})
	if err != nil || other.Duplicate {
		t.Fatalf("another publisher's owner with the same key: %+v, %v", other, err)
	}
	h.clk.Advance(topicstore.DefaultIdemWindow)
	late, err := s.PublishMessage(ctx, "P:acme:p", "x", &grain.Message{IdempotencyKey: "k1"})
	if err != nil || late.Duplicate {
		t.Fatalf("after the window: %+v, %v", late, err)
	}
	waitStats(t, s, "three acks", func(st Stats) bool { return st.Acked == 3 })
}

// gatedStore holds back the registry updates of one Service until opened,
// so that it publishes with subscriptions it has not seen.
type gatedStore struct {
	topicstore.Store
	open  chan struct{}
	stale chan struct{} // closed at the first StaleError
	once  sync.Once
}

func (g *gatedStore) Append(ctx context.Context, items []*topicstore.Item, versions map[string]int64) error {
	err := g.Store.Append(ctx, items, versions)
	if errors.Is(err, topicstore.ErrStale) {
		g.once.Do(func() { close(g.stale) })
	}
	return err
}

func (g *gatedStore) FollowRegistry(ctx context.Context, f func(*topicstore.Registry)) {
	first := true
	g.Store.FollowRegistry(ctx, func(r *topicstore.Registry) {
		if !first {
			select {
			case <-g.open:
			case <-ctx.Done():
				return
			}
		}
		first = false
		f(r)
	})
}

// No window: a publish through a silo that has not seen a subscription yet
// still reaches it, once Subscribe returned elsewhere.
func TestNoWindowAfterSubscribe(t *testing.T) {
	mem := topicstore.NewMemory(nil, 0)
	h := newHarness(t, mem)
	sub := h.service(nil)
	gated := &gatedStore{Store: mem, open: make(chan struct{}), stale: make(chan struct{})}
	hp := &harness{t: t, store: gated, clk: h.clk, a: newAgents()}
	pub := hp.service(func(c *Config) { c.Owns = func(string) bool { return false } })
	h.subscribe(sub, "W:acme:w", "n", "orders.#", 0)
	done := make(chan string, 1)
	go func() { done <- hp.publish(pub, "P:acme:p", "orders.new", "x") }()
	<-gated.stale // the publisher did not know the subscription
	close(gated.open)
	id := <-done
	got := h.a.wait(t, "the delivery", func(got []*grain.Message) bool { return len(got) == 1 })
	if got[0].ID != id {
		t.Fatalf("delivered %s, published %s", got[0].ID, id)
	}
}

// Unavailable (the agent's silo is unreachable) is retried without
// counting an attempt, so no dead letter comes of a silo's death.
func TestUnavailableIsNotAnAttempt(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	calls := 0
	h.a.handle = func(m *grain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= 4 {
			return errs.New(codes.Unavailable, "silo gone")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "W:acme:w", "work", "jobs", 2)
	h.publish(s, "P:acme:p", "jobs", "x")
	for i := 1; i <= 4; i++ {
		waitStats(t, s, "an unavailable delivery", func(st Stats) bool { return st.Unavailable == uint64(i) })
		h.clk.Advance(10 * time.Second)
	}
	got := h.a.wait(t, "the ack", func(got []*grain.Message) bool { return len(got) == 5 })
	waitStats(t, s, "the ack", func(st Stats) bool { return st.Acked == 1 && st.DeadLettered == 0 })
	for _, m := range got {
		if m.Attempt != 1 {
			t.Fatalf("attempt %d: Unavailable counted as an attempt", m.Attempt)
		}
	}
}

// A delivery is on behalf of its subscriber's owner: not of the publisher,
// and not of a principal the published message claims.
func TestDeliveryOnBehalfOfSubscriber(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	s := h.service(nil)
	h.subscribe(s, "Relay:mallory:r", "in", "mallory:in", 0)
	if _, err := s.Publish(t.Context(), "Session:mallory:s", "mallory:in", &grain.Message{Message: "x", OnBehalfOf: "ops"}); err != nil {
		t.Fatal(err)
	}
	got := h.a.wait(t, "the delivery", func(got []*grain.Message) bool { return len(got) == 1 })
	if p := got[0].OnBehalfOf; p != "mallory" {
		t.Fatalf("delivery on behalf of %q, want the subscriber's owner mallory", p)
	}
}

// Subscriptions per owner and agents per subscription are bounded.
func TestSubscriptionBounds(t *testing.T) {
	h := newHarness(t, nil)
	s := h.service(func(c *Config) { c.MaxSubscriptions = 2; c.MaxMembers = 2 })
	h.subscribe(s, "W:acme:a", "one", "x", 0)
	h.subscribe(s, "W:acme:b", "one", "x", 0)
	h.subscribe(s, "W:acme:a", "two", "x", 0)
	ctx := t.Context()
	if err := s.waitRegistry(ctx, func(r *topicstore.Registry) bool {
		return len(r.Owned("acme")) == 2 && len(r.Subs["acme:one"].Members) == 2
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(ctx, addr("W:acme:c"), "one", "x", 0); errs.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third member: %v, want ResourceExhausted", err)
	}
	if err := s.Subscribe(ctx, addr("W:acme:c"), "three", "x", 0); errs.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third subscription: %v, want ResourceExhausted", err)
	}
	h.subscribe(s, "W:bob:c", "three", "x", 0) // another owner's
}

// A subscription's listing counts the messages queued and, of them, those
// being delivered now.
func TestSubscriptionCounts(t *testing.T) {
	h := newHarness(t, topicstore.NewMemory(nil, 0))
	release := make(chan struct{})
	h.a.handle = func(*grain.Message) error {
		<-release
		return nil
	}
	s := h.service(func(c *Config) { c.MaxInflight = 2 })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the service's Close, which waits for deliveries
	h.subscribe(s, "Worker:acme:w", "work", "jobs", 0)
	for i := range 5 { // from three publishers: each one's messages go in order, one at a time
		h.publish(s, fmt.Sprintf("P:acme:p%d", i%3), "jobs", fmt.Sprint(i))
	}
	h.a.wait(t, "two deliveries in flight", func(got []*grain.Message) bool { return len(got) == 2 })
	counts := func() (uint64, uint64) {
		t.Helper()
		subs, err := s.Subscriptions(t.Context(), "acme")
		if err != nil || len(subs) != 1 {
			t.Fatalf("subscriptions: %v, %v", subs, err)
		}
		return subs[0].GetBacklog(), subs[0].GetInFlight()
	}
	// The engine learns of the queued messages from the store's events.
	testutil.WaitFor(t, "5 queued, 2 in flight", func() bool { q, f := counts(); return q == 5 && f == 2 })
	free()
	waitStats(t, s, "all acked", func(st Stats) bool { return st.Acked == 5 })
	testutil.WaitFor(t, "none queued or in flight after the acks", func() bool { q, f := counts(); return q == 0 && f == 0 })
}
