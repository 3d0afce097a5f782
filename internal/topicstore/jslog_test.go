package topicstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/internal/natstest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// A subscription written by the layout before the log (its queue in the
// queue bucket, no consumer) is taken over as it is: its entries are
// delivered first, it gets its consumer, and what is published from then
// on reaches it after them; one message of the log per publish.
func TestJetStreamMigratesQueuesOfTheLayoutBefore(t *testing.T) {
	s := jetStreamStore(t)
	ctx := t.Context()
	put := func(kv jetstream.KeyValue, k string, m proto.Message) {
		t.Helper()
		var v []byte
		if m != nil {
			var err error
			if v, err = proto.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.put(ctx, kv, k, v); err != nil {
			t.Fatal(err)
		}
	}
	put(s.reg, subK("acme:work"), &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#", MaxAttempts: 5})
	put(s.reg, memberK("acme:work", "W:acme:a"), nil)
	put(s.reg, verK("acme"), nil)
	for i := range 3 {
		put(s.q, itemK("acme:work", s.newKey()), &Entry{Message: entryMsg(fmt.Sprint("old", i))})
	}
	work := follow(t, s, "acme:work")
	if got := fmt.Sprint(work.texts(t, 3)); got != "[old0 old1 old2]" {
		t.Fatalf("old queue read as %s", got)
	}
	r, err := s.Subscriptions(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	before := s.Writes()
	// Once the consumer exists (the follower made it), a publish reaches it.
	testutil.WaitFor(t, "the follower to make the consumer", func() bool {
		_, err := s.js.Consumer(ctx, s.logStream(), consumerName("acme:work"))
		return err == nil
	})
	for i := range 2 {
		if err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work", "acme:other"}, Entry: entry(fmt.Sprint("new", i))}}, map[string]int64{"acme": r.Versions["acme"]}); err != nil {
			t.Fatal(err)
		}
	}
	if w := s.Writes() - before; w != 2 {
		t.Fatalf("%d stream messages for 2 publishes to 2 subscriptions, want 2", w)
	}
	if got := fmt.Sprint(work.texts(t, 5)); got != "[old0 old1 old2 new0 new1]" {
		t.Fatalf("queue %s", got)
	}
	var acks []AckKey
	work.mu.Lock()
	for _, k := range work.keys {
		acks = append(acks, AckKey{"acme:work", k})
	}
	work.mu.Unlock()
	if err := s.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	work.texts(t, 0)
}

// A subscription's consumer is its cursor: what one store acknowledged is
// not delivered again to a store that follows the queue afresh (a silo
// restarted, or another one taking the subscription over), and what it
// held unacknowledged is, once the consumer's AckWait has passed.
func TestJetStreamConsumerIsTheCursor(t *testing.T) {
	ns := natstest.Start(t)
	open := func() *JetStreamStore {
		c := DefaultJetStreamConfig(ns.URL())
		c.AckWait = time.Second
		s, err := OpenJetStream(t.Context(), c, testutil.Logger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a := open()
	ctx := t.Context()
	if _, err := a.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	r, err := a.Subscriptions(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]int64{"acme": r.Versions["acme"]}
	for i := range 5 {
		if err := a.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry(fmt.Sprint(i))}}, versions); err != nil {
			t.Fatal(err)
		}
	}
	fctx, stop := context.WithCancel(ctx)
	fa := &follower{live: map[string]*Entry{}, change: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.FollowQueue(fctx, "acme:work", func(ev QueueEvent) {
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if ev.Entry != nil {
				if _, ok := fa.live[ev.Key]; !ok {
					fa.keys = append(fa.keys, ev.Key)
				}
				fa.live[ev.Key] = ev.Entry
			} else if !ev.Reset {
				delete(fa.live, ev.Key)
			}
			close(fa.change)
			fa.change = make(chan struct{})
		})
	}()
	fa.texts(t, 5)
	var acks []AckKey
	for _, text := range []string{"0", "1", "2"} {
		acks = append(acks, AckKey{"acme:work", fa.key(t, text)})
	}
	if err := a.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	fa.texts(t, 2)
	stop() // a's silo is gone, holding 3 and 4
	<-done

	b := open()
	fb := follow(t, b, "acme:work")
	if got := fmt.Sprint(fb.texts(t, 2)); got != "[3 4]" {
		t.Fatalf("taken over: %s", got)
	}
	if err := b.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry("5")}}, versions); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(fb.texts(t, 3)); got != "[3 4 5]" {
		t.Fatalf("then: %s", got)
	}
}

// A store that takes a subscription over from one that stopped while
// holding messages (its silo died) hands those out first, in log order,
// before what was published later, without waiting for the consumer's
// AckWait (after which, without it, they came after the later ones);
// once settled, their deliveries again by the consumer are acknowledged,
// not handed out again.
func TestJetStreamTakeOverKeepsOrder(t *testing.T) {
	ns := natstest.Start(t)
	open := func() *JetStreamStore {
		c := DefaultJetStreamConfig(ns.URL())
		c.AckWait = 2 * time.Second
		s, err := OpenJetStream(t.Context(), c, testutil.Logger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a := open()
	ctx := t.Context()
	const id = "acme:work"
	if _, err := a.Subscribe(ctx, &SubscriptionRecord{Id: id, Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	r, err := a.Subscriptions(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]int64{"acme": r.Versions["acme"]}
	publish := func(s *JetStreamStore, text string) {
		t.Helper()
		if err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{id}, Entry: entry(text)}}, versions); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		publish(a, fmt.Sprint(i))
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	fa := &follower{live: map[string]*Entry{}, change: make(chan struct{})}
	go func() {
		defer close(done)
		a.FollowQueue(fctx, id, func(ev QueueEvent) {
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if ev.Entry != nil {
				if _, ok := fa.live[ev.Key]; !ok {
					fa.keys = append(fa.keys, ev.Key)
				}
				fa.live[ev.Key] = ev.Entry
			} else if !ev.Reset {
				delete(fa.live, ev.Key)
			}
			close(fa.change)
			fa.change = make(chan struct{})
		})
	}()
	fa.texts(t, 5)
	var acks []AckKey
	for _, text := range []string{"0", "1", "2"} {
		acks = append(acks, AckKey{id, fa.key(t, text)})
	}
	if err := a.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	fa.texts(t, 2)
	stop() // a's silo is gone, holding 3 and 4
	<-done
	publish(a, "5")

	b := open()
	fb := follow(t, b, id)
	if got := fmt.Sprint(fb.texts(t, 3)); got != "[3 4 5]" {
		t.Fatalf("taken over: %s, want what a held first, in order", got)
	}
	acks = acks[:0]
	for _, text := range []string{"3", "4", "5"} {
		acks = append(acks, AckKey{id, fb.key(t, text)})
	}
	if err := b.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	fb.texts(t, 0)
	c, err := b.js.Consumer(ctx, b.logStream(), consumerName(id))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the consumer's deliveries again of 3 and 4 acknowledged", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0
	})
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.keys) != 3 || len(fb.live) != 0 {
		t.Fatalf("after the consumer delivered 3 and 4 again: handed out %d, present %d; want 3 and none", len(fb.keys), len(fb.live))
	}
}

// The decode cache hands the same entry for one stream sequence, keeps at
// most cacheSlots entries, and no message larger than cacheMaxBytes.
func TestDecodeCacheBounded(t *testing.T) {
	var c decodeCache
	b, err := encodeRecord(entry("x"), []string{"acme:a", "acme:b"})
	if err != nil {
		t.Fatal(err)
	}
	e1, err := c.decode(1, b)
	if err != nil {
		t.Fatal(err)
	}
	if e2, _ := c.decode(1, b); e2 != e1 || e1.GetMessage().GetMessage() != "x" {
		t.Fatalf("decoded again: %v, %v", e1, e2)
	}
	for seq := uint64(2); seq < 3*cacheSlots; seq++ {
		if _, err := c.decode(seq, b); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.m); n != cacheSlots {
		t.Fatalf("%d entries kept, want %d", n, cacheSlots)
	}
	big, err := encodeRecord(entry(strings.Repeat("x", cacheMaxBytes)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.decode(1<<40, big); err != nil {
		t.Fatal(err)
	}
	if _, kept := c.m[1<<40]; kept {
		t.Fatal("a large message kept")
	}
}
