package topicstore

import (
	"context"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// On etcd, a session's member is on the store's lease: Close revokes it,
// and Prune deletes the subscription then, with its queue; Subscriptions
// reads etcd.
func TestSessionLeaseOnEtcd(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	store := NewEtcdStore(cli, "/sess/", nil)
	ctx := t.Context()
	rec := &SubscriptionRecord{Id: "acme:s", Pattern: "acme:orders.#", MaxAttempts: 5}
	if _, err := store.SubscribeSession(ctx, rec, "Session:acme:x"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Subscribe(ctx, &SubscriptionRecord{Id: "acme:agents", Pattern: "acme:orders.#", MaxAttempts: 5}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	mk := store.memberPrefix("acme:s") + "Session:acme:x"
	r, err := cli.Get(ctx, mk)
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease == 0 {
		t.Fatalf("the member's key: %v %v", r, err)
	}
	reg, err := store.Subscriptions(ctx, "acme")
	if err != nil || len(reg.Subs) != 2 || !reg.Subs["acme:s"].Session || reg.Subs["acme:agents"].Session {
		t.Fatalf("subscriptions: %v %v", reg, err)
	}
	if ok, err := store.Prune(ctx, "acme:s"); ok || err != nil {
		t.Fatalf("prune with a member: %v %v", ok, err)
	}
	if err := store.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:s"}, Entry: entry("q")}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, mk); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the member after Close: %v %v", r, err)
	}
	if ok, err := store.Prune(ctx, "acme:s"); !ok || err != nil {
		t.Fatalf("prune without members: %v %v", ok, err)
	}
	r, err = cli.Get(ctx, "/sess/topics/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		if strings.Contains(string(kv.Key), "acme:s/") || strings.HasSuffix(string(kv.Key), "acme:s") {
			t.Errorf("left after prune: %s", kv.Key)
		}
	}
	if _, err := store.SubscribeSession(ctx, rec, "Session:acme:y"); errs.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe a session on a closed store: %v", err)
	}
}

// A follower whose watch revision was compacted away reads afresh and
// misses nothing written meanwhile.
func TestFollowSurvivesCompaction(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	store := NewEtcdStore(cli, "/cmp/", nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := store.Subscribe(ctx, &SubscriptionRecord{Id: "acme:q", Pattern: "acme:x", MaxAttempts: 5}, "W:acme:a"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	store.testHookLoaded = func() {
		once.Do(func() {
			// Between the load and the watch: writes, then a compaction
			// past the revision the watch starts from.
			for _, text := range []string{"a", "b"} {
				if err := store.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:q"}, Entry: entry(text)}}, nil); err != nil {
					t.Error(err)
				}
			}
			r, err := cli.Get(ctx, "/cmp/")
			if err == nil {
				_, err = cli.Compact(ctx, r.Header.Revision)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	var mu sync.Mutex
	resets := 0
	queue := map[string]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.FollowQueue(ctx, "acme:q", func(ev QueueEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ev.Reset:
				resets++
				queue = map[string]string{}
			case ev.Entry == nil:
				delete(queue, ev.Key)
			default:
				queue[ev.Key] = ev.Entry.GetMessage().GetMessage()
			}
		})
	}()
	testutil.WaitFor(t, "both entries after a reload", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return resets >= 2 && len(queue) == 2
	})
	// And it follows on from there.
	if err := store.Append(ctx, []*Item{{Owner: "acme", Subs: []string{"acme:q"}, Entry: entry("c")}}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the entry after the reload", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queue) == 3
	})
	cancel()
	<-done
}
