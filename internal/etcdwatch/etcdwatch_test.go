package etcdwatch_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/etcdwatch"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handed is one call of a Follower's Load (load true: kvs is the view
// read) or Events (events, as "put k=v" and "delete k").
type handed struct {
	load   bool
	kvs    map[string]string
	events []string
	rev    int64
}

// recorder is the caller of a Follower in these tests: it records what is
// handed to it and what fails.
type recorder struct {
	calls  chan handed
	failed chan error
	// loadErr, if it sends, is what the next Load returns.
	loadErr chan error
}

func newRecorder() *recorder {
	return &recorder{calls: make(chan handed, 100), failed: make(chan error, 100), loadErr: make(chan error, 1)}
}

func (r *recorder) follower(cli *clientv3.Client, key string, prefix bool) *etcdwatch.Follower {
	return &etcdwatch.Follower{
		Client: cli,
		Key:    key,
		Prefix: prefix,
		Load: func(kvs []*mvccpb.KeyValue, rev int64) error {
			select {
			case err := <-r.loadErr:
				return err
			default:
			}
			m := make(map[string]string, len(kvs))
			for _, kv := range kvs {
				m[string(kv.Key)] = string(kv.Value)
			}
			r.calls <- handed{load: true, kvs: m, rev: rev}
			return nil
		},
		Events: func(evs []*clientv3.Event, rev int64) {
			if len(evs) == 0 {
				return // a progress notification
			}
			var out []string
			for _, ev := range evs {
				if ev.Type == clientv3.EventTypeDelete {
					out = append(out, "delete "+string(ev.Kv.Key))
				} else {
					out = append(out, "put "+string(ev.Kv.Key)+"="+string(ev.Kv.Value))
				}
			}
			r.calls <- handed{events: out, rev: rev}
		},
		Failed: func(err error) { r.failed <- err },
	}
}

// next returns the next call handed to the recorder.
func (r *recorder) next(t *testing.T) handed {
	t.Helper()
	select {
	case h := <-r.calls:
		return h
	case <-testutil.WaitContext(t).Done():
		t.Fatal("nothing handed over")
		return handed{}
	}
}

func (r *recorder) wantLoad(t *testing.T, rev int64, kvs map[string]string) {
	t.Helper()
	h := r.next(t)
	if !h.load || h.rev != rev || !maps.Equal(h.kvs, kvs) {
		t.Fatalf("handed %+v; want a load of %v at revision %d", h, kvs, rev)
	}
}

func (r *recorder) wantEvents(t *testing.T, rev int64, events ...string) {
	t.Helper()
	h := r.next(t)
	if h.load || h.rev != rev || !slices.Equal(h.events, events) {
		t.Fatalf("handed %+v; want events %q at revision %d", h, events, rev)
	}
}

func put(t *testing.T, cli *clientv3.Client, k, v string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), k, v)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func del(t *testing.T, cli *clientv3.Client, k string) int64 {
	t.Helper()
	resp, err := cli.Delete(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// run runs f until the test ends, or until the returned stop is called
// (which waits for Run to return).
func run(t *testing.T, f *etcdwatch.Follower) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testutil.WaitTimeout):
			t.Error("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitTimer waits until something waits on clk.
func waitTimer(t *testing.T, clk *clock.Fake) {
	t.Helper()
	ctx := testutil.WaitContext(t)
	for {
		n, added := clk.Waiting()
		if n > 0 {
			return
		}
		select {
		case <-added:
		case <-ctx.Done():
			t.Fatal("nothing waits on the clock")
		}
	}
}

// TestLoadThenEvents: everything under the prefix (and nothing beside it)
// is handed over with the revision read, then each put and delete with
// its revision.
func TestLoadThenEvents(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	put(t, cli, "/p/a", "1")
	put(t, cli, "/q", "beside")
	rev := put(t, cli, "/p/b", "2")
	r := newRecorder()
	run(t, r.follower(cli, "/p/", true))
	r.wantLoad(t, rev, map[string]string{"/p/a": "1", "/p/b": "2"})

	rev = put(t, cli, "/p/c", "3")
	r.wantEvents(t, rev, "put /p/c=3")
	rev = del(t, cli, "/p/a")
	r.wantEvents(t, rev, "delete /p/a")
	put(t, cli, "/q", "beside again")
	rev = put(t, cli, "/p/b", "22")
	r.wantEvents(t, rev, "put /p/b=22")
	if len(r.failed) != 0 {
		t.Fatalf("failed: %v", <-r.failed)
	}
}

// TestOneKey: without Prefix the key alone is followed, not the keys
// that start with it.
func TestOneKey(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	put(t, cli, "/k2", "longer")
	r := newRecorder()
	run(t, r.follower(cli, "/k", false))
	h := r.next(t)
	if !h.load || len(h.kvs) != 0 {
		t.Fatalf("handed %+v; want an empty load", h)
	}
	put(t, cli, "/k2", "longer again")
	rev := put(t, cli, "/k", "v")
	r.wantEvents(t, rev, "put /k=v")
}

// TestCompactedWatchReloads: a watch from a revision etcd compacted (as
// one resumed after etcd was away may be) fails, and after a wait on the
// Follower's clock everything is read again: the caller's view is rebuilt
// with what changed meanwhile, deletions included, and followed from there.
func TestCompactedWatchReloads(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := t.Context()
	put(t, cli, "/p/a", "1")
	rev := put(t, cli, "/p/b", "2")
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := newRecorder()
	f := r.follower(cli, "/p/", true)
	f.Clock = clk
	read, err := f.Read(ctx)
	if err != nil || read != rev {
		t.Fatalf("Read = %d, %v; want %d", read, err, rev)
	}
	r.wantLoad(t, rev, map[string]string{"/p/a": "1", "/p/b": "2"})

	// While nothing follows, the keys change and etcd compacts past rev.
	del(t, cli, "/p/a")
	put(t, cli, "/p/c", "3")
	last := put(t, cli, "/p/b", "22")
	if _, err := cli.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}

	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Follow(fctx, read)
	}()
	defer func() { cancel(); <-done }()
	select {
	case err := <-r.failed:
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("failed with %v; want ErrCompacted", err)
		}
	case <-testutil.WaitContext(t).Done():
		t.Fatal("the compacted watch did not fail")
	}
	waitTimer(t, clk)
	select {
	case h := <-r.calls:
		t.Fatalf("handed %+v before the wait", h)
	default:
	}
	clk.Advance(retry.EtcdWatch.Max)
	r.wantLoad(t, last, map[string]string{"/p/b": "22", "/p/c": "3"})
	rev = put(t, cli, "/p/d", "4")
	r.wantEvents(t, rev, "put /p/d=4")
}

// TestFailedLoadRetried: Load's error makes the read fail: it is told,
// and after a wait the read is made again.
func TestFailedLoadRetried(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	rev := put(t, cli, "/p/a", "1")
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := newRecorder()
	f := r.follower(cli, "/p/", true)
	f.Clock = clk
	bad := errors.New("unreadable")
	r.loadErr <- bad
	run(t, f)
	if err := <-r.failed; !errors.Is(err, bad) {
		t.Fatalf("failed with %v; want Load's error", err)
	}
	waitTimer(t, clk)
	clk.Advance(retry.EtcdWatch.Max)
	r.wantLoad(t, rev, map[string]string{"/p/a": "1"})
	rev = put(t, cli, "/p/a", "2")
	r.wantEvents(t, rev, "put /p/a=2")
}

// TestStopsWhenContextEnds: Run returns when its context ends, while it
// watches and while it waits to read again, leaving no goroutine behind.
func TestStopsWhenContextEnds(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	rev := put(t, cli, "/p/a", "1") // the client's connection is up
	leaks := goleak.IgnoreCurrent()

	r := newRecorder()
	stop := run(t, r.follower(cli, "/p/", true))
	r.wantLoad(t, rev, map[string]string{"/p/a": "1"})
	rev = put(t, cli, "/p/a", "2")
	r.wantEvents(t, rev, "put /p/a=2")
	stop()

	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := r.follower(cli, "/p/", true)
	f.Clock = clk
	r.loadErr <- errors.New("unreadable")
	stop = run(t, f)
	<-r.failed
	waitTimer(t, clk)
	stop()
	if len(r.calls) != 0 || len(r.failed) != 0 {
		t.Fatalf("after the context ended: %d calls, %d failures", len(r.calls), len(r.failed))
	}
	// The test's etcd client may open a connection to the embedded server
	// meanwhile (both ends in this process): its goroutines are the
	// client's and the server's, not the follower's.
	goleak.VerifyNone(t, leaks,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*loopyWriter).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Server).keepalive"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Client).keepalive"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Client).reader"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*Server).handleRawConn.func1"),
		goleak.IgnoreAnyFunction("github.com/soheilhy/cmux.(*bufferedReader).Read"),
	)
}
