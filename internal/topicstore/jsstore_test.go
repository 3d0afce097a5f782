package topicstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/natstest"
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
							items[i] = &Item{Owner: "acme", Subs: subs, Entry: entry("x")}
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
	// Held entries (retried, replayed, or of the layout before the log):
	// the queue bucket's, acknowledged with a delete marker.
	for _, id := range []string{"acme:a", "acme:b"} {
		for i := range 3 {
			b, err := proto.Marshal(entry(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.put(ctx, s.q, itemK(id, s.newKey()), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	fa := follow(t, s, "acme:a")
	fa.texts(t, 3)
	var acks []AckKey
	for i := range 3 {
		acks = append(acks, AckKey{"acme:a", fa.key(t, fmt.Sprint(i))})
	}
	// b's entries, acknowledged too: their keys from the bucket.
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

// A keyed append whose key the log holds already, from an attempt whose
// key was never remembered (its silo died after writing the log message,
// or another attempt with the key is still on its way), answers with the
// id of the message the log kept: the one its subscribers get. The key is
// then remembered with that id.
func TestJetStreamIdempotentAnswersKeptID(t *testing.T) {
	s := jetStreamStore(t)
	ctx := t.Context()
	if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	work := follow(t, s, "acme:work")
	// The other attempt: its log message, with the key's message id,
	// and no remembered key.
	b, err := encodeRecord(entryID("first", "id-1"), []string{"acme:work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.logSubject("acme"), Data: b}, jetstream.WithMsgID(idemK("acme/acme/k"))); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"id-2", "id-3"} {
		it := &Item{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("again", id), IdemKey: "acme/acme/k"}
		if err := s.Append(ctx, []*Item{it}, nil); err != nil {
			t.Fatal(err)
		}
		if !it.Done || !it.Duplicate || it.DuplicateOf != "id-1" {
			t.Fatalf("%s: done %v, duplicate %v of %q; want a duplicate of id-1", id, it.Done, it.Duplicate, it.DuplicateOf)
		}
	}
	if got := work.texts(t, 1); fmt.Sprint(got) != "[first]" {
		t.Fatalf("queue %v", got)
	}
	work.mu.Lock()
	got := work.live[work.keys[0]].GetMessage().GetId()
	work.mu.Unlock()
	if got != "id-1" {
		t.Fatalf("delivered %s, answered id-1", got)
	}
	if e, found, err := s.get(ctx, s.idem, idemK("acme/acme/k")); err != nil || !found || string(e.Value()) != "id-1" {
		t.Fatalf("remembered key: %v %v %v", e, found, err)
	}
}

// A keyed append whose key's message the log kept but no longer holds
// (every subscription acknowledged it), with no key remembered yet, fails
// Unavailable (publish again), never answering an id no subscriber got;
// once the key is remembered, the append answers with its id.
func TestJetStreamIdempotentKeptGone(t *testing.T) {
	s := jetStreamStore(t)
	ctx := t.Context()
	if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	work := follow(t, s, "acme:work")
	b, err := encodeRecord(entryID("first", "id-1"), []string{"acme:work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.logSubject("acme"), Data: b}, jetstream.WithMsgID(idemK("acme/acme/k"))); err != nil {
		t.Fatal(err)
	}
	work.texts(t, 1)
	if err := s.Ack(ctx, []AckKey{{"acme:work", work.key(t, "first")}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the acknowledged message to leave the log", func() bool {
		st, err := s.log.Info(ctx)
		return err == nil && st.State.Msgs == 0
	})
	it := &Item{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("again", "id-2"), IdemKey: "acme/acme/k"}
	if err := s.Append(ctx, []*Item{it}, nil); errs.Code(err) != codes.Unavailable || it.Done {
		t.Fatalf("kept message gone, key not remembered: %v, done %v", err, it.Done)
	}
	if _, err := s.put(ctx, s.idem, idemK("acme/acme/k"), []byte("id-1")); err != nil {
		t.Fatal(err)
	}
	it = &Item{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("again", "id-3"), IdemKey: "acme/acme/k"}
	if err := s.Append(ctx, []*Item{it}, nil); err != nil || !it.Duplicate || it.DuplicateOf != "id-1" {
		t.Fatalf("kept message gone, key remembered: %v, %+v", err, it)
	}
}

// Two stores following one subscription at once for a moment (a
// handover): a message its consumer hands to the other store is handed out
// here, read from the log, before a later message the consumer delivers
// here, rather than after the acknowledgement wait, after it.
func TestJetStreamHandoverKeepsOrder(t *testing.T) {
	ns := natstest.Start(t)
	c := DefaultJetStreamConfig(ns.URL())
	c.AckWait = time.Minute
	s, err := OpenJetStream(t.Context(), c, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	cons, err := s.js.Consumer(ctx, s.logStream(), consumerName("acme:work"))
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(n int) {
		testutil.WaitFor(t, fmt.Sprint(n, " pull requests"), func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumWaiting >= n
		})
	}
	// The other store: a pull of one message, waiting before this store
	// follows the queue (the server serves pulls in their order).
	other := make(chan jetstream.Msg, 1)
	go func() {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			return
		}
		for m := range b.Messages() {
			other <- m
		}
	}()
	waiting(1)
	work := follow(t, s, "acme:work")
	waiting(2)
	app := func(text string) {
		if err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry(text)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	app("first")
	select {
	case <-other:
	case <-time.After(20 * time.Second):
		t.Fatal("the other store's pull got nothing")
	}
	app("second")
	if got := work.texts(t, 2); fmt.Sprint(got) != "[first second]" {
		t.Fatalf("queue %v", got)
	}
}

// A queue read again (the connection came back) hands out in log order
// the messages reclaimed from a store gone and those the consumer
// delivered here since: not the later ones first.
func TestJetStreamReloadKeepsOrder(t *testing.T) {
	s := jetStreamStore(t)
	ctx := t.Context()
	if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	app := func(text string) {
		if err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry(text)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	app("first")
	app("second")
	// A store gone took both from the consumer and settled neither.
	cons, err := s.js.Consumer(ctx, s.logStream(), consumerName("acme:work"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(2, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range b.Messages() {
		n++
	}
	if n != 2 {
		t.Fatalf("the store gone got %d messages", n)
	}
	work := follow(t, s, "acme:work")
	work.texts(t, 2) // reclaimed
	app("third")     // delivered here by the consumer
	work.texts(t, 3)
	// The connection comes back: the queue is read again.
	s.reconnMu.Lock()
	close(s.reconnected)
	s.reconnected = make(chan struct{})
	s.reconnMu.Unlock()
	testutil.WaitFor(t, "the queue to be read again", func() bool {
		work.mu.Lock()
		defer work.mu.Unlock()
		return work.resets >= 2
	})
	if got := work.texts(t, 3); fmt.Sprint(got) != "[first second third]" {
		t.Fatalf("queue read again: %v", got)
	}
}
