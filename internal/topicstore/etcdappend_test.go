package topicstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// etcdWithSubs is an EtcdStore whose transactions are small (two copies
// per writer), with subscriptions acme:s0 .. acme:s<n-1> to acme:t.#.
func etcdWithSubs(t *testing.T, srv *etcdtest.Server, n int) (*EtcdStore, *clientv3.Client, map[string]int64) {
	t.Helper()
	cli := srv.Client(t)
	s := NewEtcdStore(cli, "/test/", nil)
	s.MaxOps = 7
	for i := range n {
		rec := &SubscriptionRecord{Id: fmt.Sprintf("acme:s%d", i), Pattern: "acme:t.#"}
		if _, err := s.Subscribe(t.Context(), rec, "W:acme:a"); err != nil {
			t.Fatal(err)
		}
	}
	return s, cli, registryOf(t, s).Versions
}

func subIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("acme:s%d", i)
	}
	return out
}

// queued counts the entries of each subscription's queue: the records of
// the log that name it past its cursor, and its held entries.
func queued(t *testing.T, s *EtcdStore, _ *clientv3.Client, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		st, err := s.loadQueue(t.Context(), fmt.Sprintf("acme:s%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = int64(len(st.events))
	}
	return out
}

// An idempotent publish whose copies take several transactions is written
// once: publishing it again, or concurrently, writes no copy.
func TestEtcdIdempotentAcrossTransactions(t *testing.T) {
	const n = 7 // two copies per writer: four transactions
	s, cli, versions := etcdWithSubs(t, etcdtest.Start(t), n)
	first := &Item{Subs: subIDs(n), Entry: entryID("x", "id1"), Owner: "acme", IdemKey: "acme/P/k"}
	if err := s.Append(t.Context(), []*Item{first}, versions); err != nil || !first.Done || first.Duplicate {
		t.Fatalf("first: %v %+v", err, first)
	}
	again := &Item{Subs: subIDs(n), Entry: entryID("x", "id2"), Owner: "acme", IdemKey: "acme/P/k"}
	if err := s.Append(t.Context(), []*Item{again}, versions); err != nil || !again.Done || !again.Duplicate || again.DuplicateOf != "id1" {
		t.Fatalf("again: %v %+v", err, again)
	}
	// Concurrent publishes of one new key: one is written, whole.
	var wg sync.WaitGroup
	items := make([]*Item, 8)
	for i := range items {
		items[i] = &Item{Subs: subIDs(n), Entry: entryID("y", fmt.Sprintf("y%d", i)), Owner: "acme", IdemKey: "acme/P/k2"}
		wg.Go(func() {
			if err := s.Append(t.Context(), []*Item{items[i]}, versions); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	written := 0
	for _, it := range items {
		if !it.Done {
			t.Fatalf("not done: %+v", it)
		}
		if !it.Duplicate {
			written++
		}
	}
	if written != 1 {
		t.Fatalf("%d of the concurrent publishes written", written)
	}
	for i, c := range queued(t, s, cli, n) {
		if c != 2 {
			t.Fatalf("subscription %d has %d copies; want 2 (x and y once each)", i, c)
		}
	}
}

// Items of an owner whose subscriptions changed are not queued; the other
// items of the same Append are, in the same transactions.
func TestEtcdStaleItemAmongOthers(t *testing.T) {
	s, cli, _ := etcdWithSubs(t, etcdtest.Start(t), 2)
	if _, err := s.Subscribe(t.Context(), &SubscriptionRecord{Id: "beta:s", Pattern: "beta:t"}, "W:beta:a"); err != nil {
		t.Fatal(err)
	}
	versions := registryOf(t, s).Versions
	stale := map[string]int64{"acme": versions["acme"], "beta": versions["beta"] - 1}
	ok1 := &Item{Subs: []string{"acme:s0"}, Entry: entry("a1"), Owner: "acme"}
	bad := &Item{Subs: []string{"beta:s"}, Entry: entry("b"), Owner: "beta"}
	ok2 := &Item{Subs: []string{"acme:s1"}, Entry: entry("a2"), Owner: "acme"}
	err := s.Append(t.Context(), []*Item{ok1, bad, ok2}, stale)
	var se *StaleError
	if !errors.As(err, &se) || se.Versions["beta"] != versions["beta"] {
		t.Fatalf("Append: %v", err)
	}
	if !ok1.Done || bad.Done || !ok2.Done {
		t.Fatalf("done: %v %v %v; want true false true", ok1.Done, bad.Done, ok2.Done)
	}
	if c := queued(t, s, cli, 2); c[0] != 1 || c[1] != 1 {
		t.Fatalf("acme's queues: %v", c)
	}
	st, err := s.loadQueue(t.Context(), "beta:s", nil)
	if err != nil || len(st.events) != 0 {
		t.Fatalf("beta's queue: %v, %v", st, err)
	}
}

// Many publishers at once through one store: every copy is written once,
// in each publisher's order, in fewer transactions than publishes.
func TestEtcdManyPublishers(t *testing.T) {
	const subs, pubs, each = 3, 16, 20
	srv := etcdtest.Start(t)
	s, cli, versions := etcdWithSubs(t, srv, subs)
	s.MaxOps = 128
	before := s.batch.Txns()
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Go(func() {
			for i := range each {
				e := &Entry{Message: entryMsg(fmt.Sprint(i))}
				e.Message.From = fmt.Sprintf("P:acme:p%d", p)
				if err := s.Append(t.Context(), []*Item{{Subs: subIDs(subs), Entry: e, Owner: "acme"}}, versions); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range subs {
		f := follow(t, s, fmt.Sprintf("acme:s%d", i))
		f.texts(t, pubs*each)
		f.mu.Lock()
		last := map[string]int{}
		for _, k := range f.keys {
			m := f.live[k].GetMessage()
			var n int
			fmt.Sscan(m.GetMessage(), &n)
			if prev, ok := last[m.GetFrom()]; ok && n != prev+1 {
				t.Errorf("subscription %d, %s: %d after %d", i, m.GetFrom(), n, prev)
			}
			last[m.GetFrom()] = n
		}
		f.mu.Unlock()
	}
	if c := queued(t, s, cli, subs); c[0] != pubs*each {
		t.Fatalf("queued %v", c)
	}
	t.Logf("%d publishes in %d transactions", pubs*each, s.batch.Txns()-before)
}

// etcd stopping under a publish fails it (Unavailable, or the caller's
// deadline), and nothing is Done; once etcd is back, publishing works.
func TestEtcdFailsUnderAppend(t *testing.T) {
	srv := etcdtest.Start(t)
	s, _, versions := etcdWithSubs(t, srv, 1)
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	it := &Item{Subs: subIDs(1), Entry: entry("lost"), Owner: "acme"}
	err := s.Append(ctx, []*Item{it}, versions)
	cancel()
	if c := errs.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable || it.Done {
		t.Fatalf("Append with etcd stopped: %v (%v), done %v", err, c, it.Done)
	}
	srv.Restart()
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		it := &Item{Subs: subIDs(1), Entry: entry("back"), Owner: "acme"}
		err := s.Append(ctx, []*Item{it}, versions)
		if err == nil && it.Done {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd back, still: %v", err)
		}
	}
}
