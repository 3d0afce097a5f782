package etcdbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func put(k, v string) *Write { return &Write{Then: []clientv3.Op{clientv3.OpPut(k, v)}} }

// createIfAbsent puts k only if it does not exist, else reads it.
func createIfAbsent(k, v string) *Write {
	return &Write{
		If:   []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		Then: []clientv3.Op{clientv3.OpPut(k, v)},
		Else: []clientv3.Op{clientv3.OpGet(k)},
	}
}

func get(t *testing.T, cli *clientv3.Client, k string) string {
	t.Helper()
	resp, err := cli.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// Writers that arrive while a transaction is in flight go together in the
// next one: the first commit is held until 50 more writers queue.
func TestManyWritersShareOneTransaction(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{MaxInflight: 1})
	release := make(chan struct{})
	var sizes []int
	var mu sync.Mutex
	b.testHookCommit = func(batch []*Write) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
	}
	first := make(chan error, 1)
	go func() { first <- b.Do(t.Context(), put("/b/first", "1")) }()
	testutil.WaitFor(t, "the first commit in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sizes) == 1
	})
	const n = 50
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Go(func() { errc <- b.Do(t.Context(), put(fmt.Sprintf("/b/k%02d", i), fmt.Sprint(i))) })
	}
	testutil.WaitFor(t, "50 writers queued", func() bool { return b.queued() == n })
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(sizes) != 2 || sizes[1] != n {
		t.Fatalf("transactions of %v writers; want [1 %d]", sizes, n)
	}
	if b.Txns() != 2 || b.Writes() != n+1 {
		t.Fatalf("%d transactions, %d writes", b.Txns(), b.Writes())
	}
	for i := range n {
		if v := get(t, cli, fmt.Sprintf("/b/k%02d", i)); v != fmt.Sprint(i) {
			t.Fatalf("k%02d = %q", i, v)
		}
	}
}

// A batch is bounded by the operations of a level: 200 writers of one put
// each need two transactions at MaxOps 128.
func TestBatchBoundedByMaxOps(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{})
	ws := make([]*Write, 200)
	for i := range ws {
		ws[i] = put(fmt.Sprintf("/b/%03d", i), "v")
	}
	if err := b.Do(t.Context(), ws...); err != nil {
		t.Fatal(err)
	}
	if b.Txns() != 2 {
		t.Fatalf("%d transactions; want 2", b.Txns())
	}
	if ws[0].Revision >= ws[199].Revision {
		t.Fatalf("revisions %d, %d: the second part went first", ws[0].Revision, ws[199].Revision)
	}
	resp, err := cli.Get(t.Context(), "/b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 200 {
		t.Fatalf("%v keys, %v", resp.Count, err)
	}
}

// With several transactions in flight, each caller's writes still commit
// in its order (a part of its writes waits for the part before it), and
// all are written.
func TestInflightKeepsEachCallersOrder(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{MaxInflight: 4})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for r := range 5 {
				ws := make([]*Write, 150) // two transactions each
				for i := range ws {
					ws[i] = put(fmt.Sprintf("/b/%d/%d/%03d", c, r, i), "v")
				}
				if err := b.Do(t.Context(), ws...); err != nil {
					t.Error(err)
					return
				}
				for i := 1; i < len(ws); i++ {
					if ws[i].Revision < ws[i-1].Revision {
						t.Errorf("caller %d: write %d at revision %d, before %d's %d", c, i, ws[i].Revision, i-1, ws[i-1].Revision)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	resp, err := cli.Get(t.Context(), "/b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 8*5*150 {
		t.Fatalf("%v keys, %v", resp.Count, err)
	}
	t.Logf("%d writes in %d transactions", b.Writes(), b.Txns())
}

// A caller's writes waiting for their earlier part in flight do not hold
// up another caller's: those go in another transaction meanwhile.
func TestOtherCallersPassAWaitingPart(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{MaxInflight: 2})
	release := make(chan struct{})
	inFlight := make(chan struct{})
	var held atomic.Bool
	b.testHookCommit = func([]*Write) {
		if held.CompareAndSwap(false, true) { // the first commit only
			close(inFlight)
			<-release
		}
	}
	ws := make([]*Write, 200) // two transactions: the second waits for the first
	for i := range ws {
		ws[i] = put(fmt.Sprintf("/b/a/%03d", i), "v")
	}
	first := make(chan error, 1)
	go func() { first <- b.Do(t.Context(), ws...) }()
	<-inFlight
	if err := b.Do(t.Context(), put("/b/other", "1")); err != nil {
		t.Fatal(err)
	}
	if get(t, cli, "/b/other") != "1" || get(t, cli, "/b/a/000") != "" {
		t.Fatal("the other caller's write did not go first")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if ws[0].Revision >= ws[199].Revision {
		t.Fatalf("revisions %d, %d: the second part went first", ws[0].Revision, ws[199].Revision)
	}
}

// A writer whose condition fails fails alone: the others of its
// transaction are written.
func TestConditionFailsOneWriter(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	if _, err := cli.Put(t.Context(), "/b/taken", "old"); err != nil {
		t.Fatal(err)
	}
	b := New(cli, Config{})
	w1, w2, w3 := createIfAbsent("/b/one", "1"), createIfAbsent("/b/taken", "new"), createIfAbsent("/b/three", "3")
	if err := b.Do(t.Context(), w1, w2, w3); err != nil {
		t.Fatal(err)
	}
	if b.Txns() != 1 {
		t.Fatalf("%d transactions; want 1", b.Txns())
	}
	if !w1.Succeeded || w2.Succeeded || !w3.Succeeded {
		t.Fatalf("succeeded %v %v %v; want true false true", w1.Succeeded, w2.Succeeded, w3.Succeeded)
	}
	if kvs := w2.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "old" {
		t.Fatalf("the failed writer's Else read %v", kvs)
	}
	if w1.Revision != w3.Revision || w1.Revision == 0 {
		t.Fatalf("revisions %d, %d: want one", w1.Revision, w3.Revision)
	}
	if get(t, cli, "/b/one") != "1" || get(t, cli, "/b/three") != "3" || get(t, cli, "/b/taken") != "old" {
		t.Fatal("wrong values")
	}
}

// A writer etcd refuses (its lease is gone) fails the shared transaction;
// each writer is then tried alone, and only that one fails, with the code
// it has alone.
func TestRefusedWriterFailsAlone(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l, err := cli.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	b := New(cli, Config{})
	bad := &Write{Then: []clientv3.Op{clientv3.OpPut("/b/bad", "x", clientv3.WithLease(l.ID))}}
	w1, w3 := put("/b/one", "1"), put("/b/three", "3")
	err = b.Do(t.Context(), w1, bad, w3)
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) || !errors.Is(bad.Err(), rpctypes.ErrLeaseNotFound) {
		t.Fatalf("Do: %v; the bad writer: %v", err, bad.Err())
	}
	// The code it would have had alone.
	_, alone := cli.Txn(t.Context()).Then(clientv3.OpPut("/b/bad", "x", clientv3.WithLease(l.ID))).Commit()
	want := errs.Code(etcderr.FromCall(t.Context(), alone, "write"))
	if c := errs.Code(etcderr.FromCall(t.Context(), bad.Err(), "write")); c != want || alone == nil {
		t.Fatalf("code %v; want %v (%v)", c, want, alone)
	}
	if w1.Err() != nil || w3.Err() != nil || !w1.Succeeded || !w3.Succeeded {
		t.Fatalf("the others: %v %v", w1.Err(), w3.Err())
	}
	if get(t, cli, "/b/one") != "1" || get(t, cli, "/b/three") != "3" || get(t, cli, "/b/bad") != "" {
		t.Fatal("wrong values")
	}
}

// Two writers of one key are not put in one transaction (etcd refuses a
// key twice): the second goes in the next, and wins.
func TestSameKeyNextTransaction(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{})
	w1, w2, w3 := put("/b/k", "1"), put("/b/other", "o"), put("/b/k", "2")
	del := &Write{Then: []clientv3.Op{clientv3.OpDelete("/b/other")}}
	if err := b.Do(t.Context(), w1, w2, w3, del); err != nil {
		t.Fatal(err)
	}
	if b.Txns() != 2 {
		t.Fatalf("%d transactions; want 2", b.Txns())
	}
	if get(t, cli, "/b/k") != "2" || get(t, cli, "/b/other") != "" {
		t.Fatal("wrong values")
	}
}

// When etcd goes away, the writers of the transaction in flight and those
// queued fail with Unavailable; once it is back, writes go through again.
func TestEtcdFailsMidBatch(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	b := New(cli, Config{Timeout: 500 * time.Millisecond, MaxInflight: 1})
	if err := b.Do(t.Context(), put("/b/before", "1")); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	inFlight := make(chan struct{})
	var once sync.Once
	b.testHookCommit = func([]*Write) {
		once.Do(func() {
			close(inFlight)
			<-release
		})
	}
	first := make(chan error, 1)
	go func() { first <- b.Do(t.Context(), put("/b/a", "1"), put("/b/b", "2")) }()
	<-inFlight
	later := make(chan error, 1)
	go func() { later <- b.Do(t.Context(), put("/b/c", "3")) }()
	testutil.WaitFor(t, "a writer queued", func() bool { return b.queued() == 1 })
	srv.Stop()
	close(release)
	for _, ch := range []chan error{first, later} {
		err := <-ch
		if err == nil {
			t.Fatal("a write succeeded with etcd stopped")
		}
		if c := errs.Code(etcderr.FromCall(t.Context(), err, "write")); c != codes.Unavailable {
			t.Fatalf("%v: code %v; want Unavailable", err, c)
		}
	}
	srv.Restart()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitTimeout)
	defer cancel()
	for {
		err := b.Do(ctx, put("/b/after", "1"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd back, still: %v", err)
		}
	}
}

// A caller whose context ends while its writes wait takes them back: they
// are never written.
func TestCancelledWhileQueued(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{MaxInflight: 1})
	release := make(chan struct{})
	inFlight := make(chan struct{})
	var once sync.Once
	b.testHookCommit = func([]*Write) {
		once.Do(func() {
			close(inFlight)
			<-release
		})
	}
	first := make(chan error, 1)
	go func() { first <- b.Do(t.Context(), put("/b/a", "1")) }()
	<-inFlight
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	w := put("/b/never", "1")
	go func() { gone <- b.Do(ctx, w) }()
	testutil.WaitFor(t, "a writer queued", func() bool { return b.queued() == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) || !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("Do: %v, write: %v", err, w.Err())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if b.queued() != 0 || get(t, cli, "/b/never") != "" {
		t.Fatal("the cancelled write was kept")
	}
}

// A write queued by Go can be withdrawn while it waits: it is never
// written and its Wait says so; once in a transaction, it cannot be, and
// Wait gives its outcome.
func TestWithdraw(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	b := New(cli, Config{MaxInflight: 1})
	release := make(chan struct{})
	inFlight := make(chan struct{})
	var once sync.Once
	b.testHookCommit = func([]*Write) {
		once.Do(func() {
			close(inFlight)
			<-release
		})
	}
	sent := put("/b/sent", "1")
	b.Go(sent)
	<-inFlight
	waiting, other := put("/b/withdrawn", "1"), put("/b/other", "1")
	b.Go(waiting)
	b.Go(other)
	if b.Withdraw(sent) {
		t.Fatal("withdrew a write in flight")
	}
	if !b.Withdraw(waiting) {
		t.Fatal("could not withdraw a queued write")
	}
	if b.Withdraw(waiting) {
		t.Fatal("withdrew a write twice")
	}
	if err := b.Wait(testutil.WaitContext(t), waiting); !errors.Is(err, ErrWithdrawn) || !errors.Is(waiting.Err(), ErrWithdrawn) {
		t.Fatalf("Wait: %v, Err: %v", err, waiting.Err())
	}
	close(release)
	if err := b.Wait(testutil.WaitContext(t), sent); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(testutil.WaitContext(t), other); err != nil {
		t.Fatal(err)
	}
	if b.Withdraw(other) {
		t.Fatal("withdrew a settled write")
	}
	if get(t, cli, "/b/sent") != "1" || get(t, cli, "/b/other") != "1" || get(t, cli, "/b/withdrawn") != "" || b.queued() != 0 {
		t.Fatal("wrong values")
	}
}
