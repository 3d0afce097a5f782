package topics

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/natstest"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// jetStreamStore returns a JetStreamStore on a nats-server of its own,
// closed when t ends.
func jetStreamStore(t *testing.T) *JetStreamStore {
	t.Helper()
	ns := natstest.Start(t)
	return openJetStream(t, ns.URL())
}

func openJetStream(t *testing.T, url string) *JetStreamStore {
	t.Helper()
	s, err := OpenJetStream(t.Context(), DefaultJetStreamConfig(url), testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestJetStreamConfig(t *testing.T) {
	for _, mod := range []func(*JetStreamConfig){
		func(c *JetStreamConfig) { c.Bucket = "a.b" },
		func(c *JetStreamConfig) { c.Bucket = "" },
		func(c *JetStreamConfig) { c.Replicas = 0 },
		func(c *JetStreamConfig) { c.CertFile = "x.pem" },
		func(c *JetStreamConfig) { c.OpTimeout = 0 },
	} {
		c := DefaultJetStreamConfig("nats://127.0.0.1:1")
		mod(&c)
		if _, err := OpenJetStream(t.Context(), c, nil); err == nil {
			t.Fatalf("%+v: no error", c)
		}
	}
	// Nothing listening: one error, Unavailable.
	c := DefaultJetStreamConfig("nats://" + testutil.FreeAddr(t))
	if _, err := OpenJetStream(context.Background(), c, nil); errs.Code(err) != codes.Unavailable {
		t.Fatalf("no server: %v", err)
	}
}

// The Service over JetStream: fan-out, a publisher's order, retries and
// dead letters end to end.
func TestServiceOnJetStream(t *testing.T) {
	h := newHarness(t, jetStreamStore(t))
	h.a.handle = func(m *grain.Message) error {
		if m.Message == "bad" {
			return grain.Poison("bad")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)
	h.subscribe(s, "W:acme:b", "two", "orders.*", 0)
	h.subscribe(s, "W:acme:c", "three", "invoices.*", 0)
	const n = 50
	var wg sync.WaitGroup
	for p := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 5 {
				h.publish(s, fmt.Sprintf("P:acme:p%d", p), "orders.new", fmt.Sprint(i))
			}
		}()
	}
	wg.Wait()
	h.publish(s, "P:acme:p", "orders.new", "bad")
	got := h.a.wait(t, "deliveries", func(got []*grain.Message) bool { return len(got) == 2*n+2 })
	last := map[string]int{}
	for _, m := range got {
		if m.To == "W:acme:c" {
			t.Fatalf("invoices.* got %v", m)
		}
		if m.Message == "bad" {
			continue
		}
		k := m.Subscription + " " + m.From
		var i int
		fmt.Sscan(m.Message, &i)
		if prev, ok := last[k]; ok && i != prev+1 {
			t.Fatalf("%s: %d after %d", k, i, prev)
		}
		last[k] = i
	}
	waitStats(t, s, "acks and dead letters", func(st Stats) bool { return st.Acked == 2*n && st.DeadLettered == 2 })
	ds, _, err := s.DeadLetters(t.Context(), "acme:one", "", 10)
	if err != nil || len(ds) != 1 || ds[0].GetReason() == "" {
		t.Fatalf("dead letters: %v %v", ds, err)
	}
}

// The NATS server is killed (SIGKILL) and restarted on its store while
// publishers publish: every publish that returned without error is
// delivered.
func TestJetStreamServerKilledUnderLoad(t *testing.T) {
	ns := natstest.Start(t)
	store := openJetStream(t, ns.URL())
	h := newHarness(t, store)
	s := h.service(func(c *Config) { c.Clock = clock.Real{}; c.MaxBacklog = 100_000 })
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)

	var mu sync.Mutex
	acked := map[string]bool{}
	var failed int
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := retry.New(10*time.Millisecond, 200*time.Millisecond, nil)
			for i := 0; ctx.Err() == nil; i++ {
				text := fmt.Sprintf("p%d-%d", p, i)
				_, err := s.Publish(ctx, fmt.Sprintf("P:acme:p%d", p), "orders.new", &grain.Message{Message: text})
				mu.Lock()
				if err == nil {
					acked[text] = true
				} else if ctx.Err() == nil {
					failed++
				}
				mu.Unlock()
				if err != nil {
					b.Wait(ctx, nil)
				} else {
					b.Reset()
				}
			}
		}()
	}
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(acked), failed }
	testutil.WaitFor(t, "200 publishes", func() bool { n, _ := count(); return n >= 200 })
	ns.Kill()
	testutil.WaitFor(t, "publishes to fail", func() bool { _, f := count(); return f > 0 })
	before, _ := count()
	t0 := time.Now()
	ns.Restart()
	testutil.WaitFor(t, "200 more publishes after the restart", func() bool { n, _ := count(); return n >= before+200 })
	t.Logf("restart to 200 more publishes: %v", time.Since(t0))
	stop()
	wg.Wait()
	n, f := count()
	t.Logf("%d publishes acknowledged, %d failed while the server was away", n, f)
	h.a.wait(t, "every acknowledged publish delivered", func(got []*grain.Message) bool {
		seen := make(map[string]bool, len(got))
		for _, m := range got {
			seen[m.Message] = true
		}
		mu.Lock()
		defer mu.Unlock()
		for text := range acked {
			if !seen[text] {
				return false
			}
		}
		return true
	})
	t.Logf("restart to all delivered: %v", time.Since(t0))
}

// A session's member lives while the store that holds it does: once that
// store is gone for SessionTTL, another store's sweep deletes the member,
// and the subscription without members can be pruned. A plain member
// stays.
func TestJetStreamSessionMembersExpire(t *testing.T) {
	ns := natstest.Start(t)
	open := func() *JetStreamStore {
		c := DefaultJetStreamConfig(ns.URL())
		c.SessionTTL = time.Second
		s, err := OpenJetStream(t.Context(), c, testutil.Logger())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	holder, other := open(), open()
	defer other.Close()
	ctx := t.Context()
	if _, err := holder.SubscribeSession(ctx, &SubscriptionRecord{Id: "acme:sess", Pattern: "acme:news.*"}, "Session:acme:s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:news.*"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	members := func(id string) int {
		r, err := other.Subscriptions(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if sub := r.Subs[id]; sub != nil {
			return len(sub.Members)
		}
		return -1
	}
	// Three sweeps of the other store while the holder lives: the
	// member stays.
	for range 3 {
		if err := other.expireSessions(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := members("acme:sess"); n != 1 {
		t.Fatalf("a live holder's session member: %d members", n)
	}
	if ok, err := other.Prune(ctx, "acme:sess"); err != nil || ok {
		t.Fatalf("prune with a member: %v %v", ok, err)
	}
	holder.Close()
	testutil.WaitFor(t, "the session member to expire", func() bool { return members("acme:sess") == 0 })
	if ok, err := other.Prune(ctx, "acme:sess"); err != nil || !ok {
		t.Fatalf("prune: %v %v", ok, err)
	}
	if n := members("acme:work"); n != 1 {
		t.Fatalf("a plain member went with the holder: %d members", n)
	}
}

// BenchmarkJetStreamAppend appends batches of 32 messages, each for 1 or
// 10 subscriptions, from 4 goroutines (the Service's MaxAppends), as the
// Service's batcher does under load: the store's own cost, without a silo
// around it. b.N is the number of messages.
func BenchmarkJetStreamAppend(b *testing.B) {
	ns := natstest.Start(b)
	s, err := OpenJetStream(b.Context(), DefaultJetStreamConfig(ns.URL()), testutil.Logger())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			var subs []string
			for i := range n {
				id := fmt.Sprintf("acme:bench%d-%d", n, i)
				if _, err := s.Subscribe(b.Context(), &SubscriptionRecord{Id: id, Pattern: "acme:bench.#"}, "W:acme:a"); err != nil {
					b.Fatal(err)
				}
				subs = append(subs, id)
			}
			r, err := s.Subscriptions(b.Context(), "acme")
			if err != nil {
				b.Fatal(err)
			}
			versions := map[string]int64{"acme": r.Versions["acme"]}
			const batch = 32
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(batch) <= int64(b.N)+batch-1 {
						items := make([]*Item, batch)
						for i := range items {
							items[i] = &Item{Subs: subs, Entry: entry("x")}
						}
						if err := s.Append(b.Context(), items, versions); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// The delete markers of acknowledged entries go from the queues this store
// follows, once older than MarkerAge; a queue nobody follows here keeps
// them.
func TestJetStreamMarkersSwept(t *testing.T) {
	ns := natstest.Start(t)
	c := DefaultJetStreamConfig(ns.URL())
	c.SweepEvery, c.MarkerAge = 20*time.Millisecond, 0
	s, err := OpenJetStream(t.Context(), c, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for _, id := range []string{"acme:a", "acme:b"} {
		if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: id, Pattern: "acme:x"}, "W:acme:w"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Subscriptions(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	fa := follow(t, s, "acme:a")
	var items []*Item
	for i := range 3 {
		items = append(items, &Item{Subs: []string{"acme:a", "acme:b"}, Entry: entry(fmt.Sprint(i))})
	}
	if err := s.Append(ctx, items, map[string]int64{"acme": r.Versions["acme"]}); err != nil {
		t.Fatal(err)
	}
	fa.texts(t, 3)
	var acks []AckKey
	for i := range 3 {
		acks = append(acks, AckKey{"acme:a", fa.key(t, fmt.Sprint(i))})
	}
	// b's entries, acknowledged too: their keys from the stream.
	es, err := s.list(ctx, s.q, enc("acme:b")+".*", true)
	if err != nil || len(es) != 3 {
		t.Fatalf("b's queue: %v %v", es, err)
	}
	for _, e := range es {
		acks = append(acks, AckKey{"acme:b", e.Key()[len(enc("acme:b"))+1:]})
	}
	if err := s.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	fa.texts(t, 0)
	count := func(id string) int {
		st, err := s.qStream.Info(ctx, jetstream.WithSubjectFilter("$KV."+c.Bucket+"_q."+enc(id)+".*"))
		if err != nil {
			t.Fatal(err)
		}
		return len(st.State.Subjects)
	}
	testutil.WaitFor(t, "a's markers to go", func() bool { return count("acme:a") == 0 })
	if n := count("acme:b"); n != 3 {
		t.Fatalf("b, followed nowhere, has %d markers, want 3", n)
	}
}
