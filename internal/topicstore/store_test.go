package topicstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// stores runs f on each Store: the memory twin and etcd (with transactions
// kept small, so that Append has to split), and NATS JetStream.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("mem", func(t *testing.T) { f(t, newMemStore(nil, 0)) })
	t.Run("etcd", func(t *testing.T) {
		cli := etcdtest.Start(t).Client(t)
		s := NewEtcdStore(cli, "/test/", nil)
		s.MaxOps = 7
		f(t, s)
	})
	t.Run("jetstream", func(t *testing.T) { f(t, jetStreamStore(t)) })
}

// follower collects a queue's events.
type follower struct {
	mu     sync.Mutex
	keys   []string          // in order
	live   map[string]*Entry // present now
	resets int
	change chan struct{}
}

func follow(t *testing.T, s Store, id string) *follower {
	f := &follower{live: map[string]*Entry{}, change: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.FollowQueue(ctx, id, func(ev QueueEvent) {
			f.mu.Lock()
			defer f.mu.Unlock()
			switch {
			case ev.Reset:
				f.keys, f.live = nil, map[string]*Entry{}
				f.resets++
			case ev.Entry == nil:
				delete(f.live, ev.Key)
			default:
				if _, ok := f.live[ev.Key]; !ok {
					f.keys = append(f.keys, ev.Key)
				}
				f.live[ev.Key] = ev.Entry
			}
			close(f.change)
			f.change = make(chan struct{})
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// texts waits until n entries are present and returns their texts in
// queue order.
func (f *follower) texts(t *testing.T, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		f.mu.Lock()
		var out []string
		for _, k := range f.keys {
			if e, ok := f.live[k]; ok {
				out = append(out, e.GetMessage().GetMessage())
			}
		}
		ch := f.change
		f.mu.Unlock()
		if len(out) == n {
			return out
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("queue has %v, want %d entries", out, n)
		}
	}
}

func (f *follower) key(t *testing.T, text string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		if e, ok := f.live[k]; ok && e.GetMessage().GetMessage() == text {
			return k
		}
	}
	t.Fatalf("no entry %q", text)
	return ""
}

func registryOf(t *testing.T, s Store) *Registry {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var r *Registry
	s.FollowRegistry(ctx, func(x *Registry) { r = x; cancel() })
	return r
}

func TestStore(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		rec := &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#", MaxAttempts: 3}
		if _, err := s.Subscribe(ctx, rec, "W:acme:a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Subscribe(ctx, rec, "W:acme:b"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:other"}, "W:acme:c"); errs.Code(err) != codes.FailedPrecondition {
			t.Fatalf("another pattern: %v", err)
		}
		if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:audit", Pattern: "acme:#"}, "W:acme:c"); err != nil {
			t.Fatal(err)
		}
		r := registryOf(t, s)
		if sub := r.Subs["acme:work"]; sub == nil || fmt.Sprint(sub.Members) != "[W:acme:a W:acme:b]" || sub.Record.GetMaxAttempts() != 3 {
			t.Fatalf("registry: %+v", r.Subs)
		}
		if r.Versions["acme"] == 0 {
			t.Fatalf("no version for acme: %v", r.Versions)
		}

		// Appends with stale versions fail and queue nothing.
		err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entry("stale")}}, map[string]int64{"acme": r.Versions["acme"] - 1})
		var stale *StaleError
		if !errors.As(err, &stale) || stale.Versions["acme"] != r.Versions["acme"] {
			t.Fatalf("stale append: %v", err)
		}
		work, audit := follow(t, s, "acme:work"), follow(t, s, "acme:audit")
		// Order over several appends, each split into transactions.
		var want []string
		for b := range 4 {
			var items []*Item
			for i := range 5 {
				text := fmt.Sprintf("m%d-%d", b, i)
				want = append(want, text)
				items = append(items, &Item{Owner: "acme", Subs: []string{"acme:work", "acme:audit"}, Entry: entry(text)})
			}
			if err := s.Append(ctx, items, map[string]int64{"acme": r.Versions["acme"]}); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				if !it.Done {
					t.Fatal("an appended item is not Done")
				}
			}
		}
		if got := work.texts(t, 20); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("queue order %v, want %v", got, want)
		}
		audit.texts(t, 20)
		// Idempotency keys.
		its := []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("once", "id1"), IdemKey: "acme/acme/k"}}
		if err := s.Append(ctx, its, nil); err != nil || its[0].Duplicate {
			t.Fatalf("first keyed append: %v %v", err, its[0].Duplicate)
		}
		its = []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("twice", "id2"), IdemKey: "acme/acme/k"}}
		if err := s.Append(ctx, its, nil); err != nil || !its[0].Duplicate || its[0].DuplicateOf != "id1" {
			t.Fatalf("second keyed append: %v %+v", err, its[0])
		}
		work.texts(t, 21)
		// Acks, updates, dead letters, replay, drop.
		acks := []AckKey{{"acme:work", work.key(t, "m0-0")}, {"acme:work", work.key(t, "m0-1")}, {"acme:work", "gone"}, {"acme:work", work.key(t, "m0-1")}, {"acme:audit", audit.key(t, "m0-0")}}
		if err := s.Ack(ctx, acks); err != nil {
			t.Fatal(err)
		}
		work.texts(t, 19)
		audit.texts(t, 19)
		k := work.key(t, "m0-2")
		if err := s.Update(ctx, "acme:work", k, &Entry{Message: entryMsg("m0-2"), Attempts: 2, LastError: "boom"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, "acme:work", "gone", &Entry{}); errs.Code(err) != codes.NotFound {
			t.Fatalf("update of a missing key: %v", err)
		}
		for _, text := range []string{"m0-2", "m0-3", "m0-4"} {
			if err := s.Kill(ctx, "acme:work", work.key(t, text), &DeadLetter{Message: entryMsg(text), Reason: "poison: " + text, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		work.texts(t, 16)
		ds, more, err := s.DeadLetters(ctx, "acme:work", "", 2)
		if err != nil || !more || len(ds) != 2 || ds[0].Reason != "poison: m0-2" {
			t.Fatalf("dead letters page 1: %v %v %v", ds, more, err)
		}
		ds2, more, err := s.DeadLetters(ctx, "acme:work", ds[1].Id, 2)
		if err != nil || more || len(ds2) != 1 || ds2[0].Reason != "poison: m0-4" {
			t.Fatalf("dead letters page 2: %v %v %v", ds2, more, err)
		}
		if n, err := s.Drop(ctx, "acme:work", []string{ds[0].Id, "nope"}); err != nil || n != 1 {
			t.Fatalf("drop: %d %v", n, err)
		}
		if n, err := s.Replay(ctx, "acme:work", nil); err != nil || n != 2 {
			t.Fatalf("replay: %d %v", n, err)
		}
		got := work.texts(t, 18)
		if got[16] != "m0-3" || got[17] != "m0-4" {
			t.Fatalf("replayed at the end: %v", got)
		}
		// The full flag.
		if err := s.SetFull(ctx, "acme:work", true); err != nil {
			t.Fatal(err)
		}
		if r := registryOf(t, s); !r.Subs["acme:work"].Full || r.Subs["acme:audit"].Full {
			t.Fatal("full flag not in the registry")
		}
		// Unsubscribing the last member deletes the subscription and bumps
		// the owner's version.
		if del, err := s.Unsubscribe(ctx, "acme:work", "W:acme:a"); err != nil || del {
			t.Fatalf("unsubscribe a: %v %v", del, err)
		}
		if _, err := s.Unsubscribe(ctx, "acme:work", "W:acme:a"); errs.Code(err) != codes.NotFound {
			t.Fatalf("unsubscribe a again: %v", err)
		}
		if del, err := s.Unsubscribe(ctx, "acme:work", "W:acme:b"); err != nil || !del {
			t.Fatalf("unsubscribe b: %v %v", del, err)
		}
		work.texts(t, 0)
		r2 := registryOf(t, s)
		if r2.Subs["acme:work"] != nil || r2.Versions["acme"] <= r.Versions["acme"] {
			t.Fatalf("after the last unsubscribe: %v %v", r2.Subs, r2.Versions)
		}
		if ds, _, _ := s.DeadLetters(ctx, "acme:work", "", 10); len(ds) != 0 {
			t.Fatalf("dead letters outlived the subscription: %v", ds)
		}
	})
}

func entryMsg(text string) *agentsilov1.AgentMessage {
	return &agentsilov1.AgentMessage{Message: text, From: "P:acme:p"}
}
func entry(text string) *Entry { return &Entry{Message: entryMsg(text)} }
func entryID(text, id string) *Entry {
	e := entry(text)
	e.Message.Id = id
	return e
}

// Idempotency keys across appends: several keyed publishes in one append
// (new keys, and one seen before) and the same key in appends running at
// once: one copy per key, the others Duplicate of the first's id.
func TestStoreIdempotentAppends(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		if _, err := s.Subscribe(ctx, &SubscriptionRecord{Id: "acme:work", Pattern: "acme:jobs.#"}, "W:acme:a"); err != nil {
			t.Fatal(err)
		}
		work := follow(t, s, "acme:work")
		its := []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("a", "id-a"), IdemKey: "acme/acme/a"}}
		if err := s.Append(ctx, its, nil); err != nil || its[0].Duplicate || !its[0].Done {
			t.Fatalf("first keyed append: %v %+v", err, its[0])
		}
		its = []*Item{
			{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("b", "id-b"), IdemKey: "acme/acme/b"},
			{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("a again", "id-a2"), IdemKey: "acme/acme/a"},
			{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("plain", "id-p")},
			{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("c", "id-c"), IdemKey: "acme/acme/c"},
		}
		if err := s.Append(ctx, its, nil); err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"", "id-a", "", ""} {
			if it := its[i]; !it.Done || it.Duplicate != (want != "") || it.DuplicateOf != want {
				t.Fatalf("item %d: %+v, want duplicate of %q", i, it, want)
			}
		}
		var wg sync.WaitGroup
		racers := make([]*Item, 4)
		errc := make(chan error, len(racers))
		for i := range racers {
			racers[i] = &Item{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("d", fmt.Sprint("id-d", i)), IdemKey: "acme/acme/d"}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errc <- s.Append(ctx, racers[i:i+1], nil)
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		var first string
		for _, it := range racers {
			if !it.Done {
				t.Fatalf("not done: %+v", it)
			}
			if !it.Duplicate {
				if first != "" {
					t.Fatalf("two firsts of one key: %s and %s", first, it.Entry.GetMessage().GetId())
				}
				first = it.Entry.GetMessage().GetId()
			}
		}
		for _, it := range racers {
			if it.Duplicate && it.DuplicateOf != first {
				t.Fatalf("%+v: want duplicate of %s", it, first)
			}
		}
		// Written after all of them: once it shows, so has any copy of d.
		if err := s.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:work"}, Entry: entryID("e", "id-e")}}, nil); err != nil {
			t.Fatal(err)
		}
		if got := work.texts(t, 6); fmt.Sprint(got) != "[a b plain c d e]" {
			t.Fatalf("queue %v", got)
		}
	})
}
