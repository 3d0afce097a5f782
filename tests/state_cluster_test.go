package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/pgtest"
	"github.com/agentsilo/agentsilo/state"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The cluster tests of agent state: the demo Counter (which keeps its count
// in the state store, saved with its etag before each reply) under kill -9
// of its silo, on either store, and a silo paused between a load and a save
// (demoagents.StateProbe), whose save must not land once it lost the agent.

// TestClusterStateChurn: two clients increment Counter:test:churn without
// pause while the silo that owns it is killed (kill -9) and restarted twice,
// then a silo that does not own it; each restart moves the counter back to
// its owner. Every reply a client gets is higher than the one before it (a
// new activation starts from the stored count, never from zero or from a
// count older than one already answered); Asks may fail while the counter
// moves. Afterwards the count is at least the highest reply, and it is what
// the etcd state store holds.
func TestClusterStateChurn(t *testing.T) { stateChurn(t, "") }

// TestClusterStateChurnPostgres: TestClusterStateChurn with the silos'
// state in PostgreSQL (--state-store postgres://...): the count is in the
// database, and none is in etcd.
func TestClusterStateChurnPostgres(t *testing.T) { stateChurn(t, pgtest.Start(t)) }

func stateChurn(t *testing.T, stateStore string) {
	opts := testcluster.Options{Silos: 3}
	if stateStore != "" {
		opts.Args = []string{"--state-store", stateStore}
	}
	c := testcluster.Start(t, opts)
	const addr = "Counter:test:churn"
	l := startCounterLoad(t, c, addr, 2, 5*time.Second)
	// Keyed increments beside: each key applied exactly once through the
	// kills, on either store.
	keyedCtx, stopKeyed := context.WithCancel(context.Background())
	var keyedWG sync.WaitGroup
	keyed := make([]*testcluster.KeyedCounter, 3)
	for w := range keyed {
		k := testcluster.NewKeyedCounter(fmt.Sprintf("Counter:test:churn-keyed-%d", w), fmt.Sprintf("churn-%d", w))
		keyed[w] = k
		cl := c.Client(t, (w+1)%c.Len(), (w+2)%c.Len(), w%c.Len())
		keyedWG.Go(func() { k.Run(keyedCtx, cl, 5*time.Second) })
	}
	t.Cleanup(func() {
		stopKeyed()
		keyedWG.Wait()
	})
	l.waitOK(t, 50)
	for round, killOwner := range []bool{true, true, false} {
		victim := siloIndex(t, c, c.Owner(addr))
		if !killOwner {
			victim = (victim + 1) % c.Len()
		}
		name := c.Silo(victim).Name
		t.Logf("round %d: kill -9 %s (owner of %s: %t) at %d replies", round+1, name, addr, killOwner, l.ok.Load())
		c.Kill(victim)
		c.WaitGone(name)
		l.waitOK(t, l.ok.Load()+50) // answered by a survivor
		c.Restart(victim)
		c.WaitMembers(c.Len())
		l.waitOK(t, l.ok.Load()+50) // answered from the restarted silo, if it owns the counter again
	}
	// Asks fail while the counter moves: Unavailable (a silo or stream
	// lost), DeadlineExceeded (a busy machine), Aborted (Counter's Update
	// met a conflict on each of its tries). Anything else (Internal: a
	// state that does not decode; FailedPrecondition: no state store) is
	// a failure of the test.
	top := l.finish(t, codes.Unavailable, codes.DeadlineExceeded, codes.Aborted)
	stopKeyed()
	keyedWG.Wait()
	for _, k := range keyed {
		k.Check(t, c.Client(t))
		r := k.Result()
		for _, line := range r.Report {
			t.Errorf("keyed: %s", line)
		}
		t.Logf("%s: %d keys answered, %d attempts failed (asked again), %d applied twice, %d lost", r.Addr, r.Keys, len(r.Failed), r.Doubles, r.Lost)
		if r.Doubles != 0 || r.Lost != 0 {
			t.Errorf("%s: %d increments applied twice and %d lost, want 0 and 0", r.Addr, r.Doubles, r.Lost)
		}
	}

	// An Ask that failed (a deadline, a silo killed after the save and
	// before the reply) may still have incremented: the count may be above
	// the highest reply, never below it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := c.Client(t).Ask(ctx, addr, &client.Message{Message: "get"})
	if err != nil {
		t.Fatalf("get %s after the churn: %v", addr, err)
	}
	count, err := strconv.ParseInt(r.Message, 10, 64)
	if err != nil {
		t.Fatalf("get %s: %q is not a count", addr, r.Message)
	}
	if count < top {
		t.Errorf("%s counts %d after the churn, below the highest reply %d: an acknowledged increment was lost", addr, count, top)
	}
	t.Logf("%s: %d replies, highest %d; %d Asks failed %v, e.g. %v; count afterwards %d (at most %d Asks could have incremented it)",
		addr, l.ok.Load(), top, l.failed.Load(), l.codeCounts(), l.sample(), count, l.ok.Load()+l.failed.Load())

	// The count is in the store the silos were given, and only there.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	a, err := grain.ParseAddress(addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(ctx, stateStore, cli, c.EtcdPrefix())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if data, _, err := st.Load(ctx, a); err != nil || string(data) != r.Message {
		t.Errorf("the state store (%q) holds %q (%v) for %s, want the count %s", stateStore, data, err, addr, r.Message)
	}
	if stateStore != "" {
		if data, etag, err := state.NewEtcd(cli, c.EtcdPrefix()).Load(ctx, a); err != nil || etag != "" {
			t.Errorf("etcd holds state %q (etag %q, %v) for %s, want none: the silos were given %s", data, etag, err, addr, stateStore)
		}
	}
}

// TestClusterStateFencedSave: a silo paused (SIGSTOP) between loading an
// agent's state and saving it loses the agent to another silo, which writes
// the state; resumed, the paused silo's save fails (Unavailable: it is
// fenced; or Aborted, had the write reached the store), or never runs
// because the silo exits first, and the held Ask fails either way. The
// other silo's write stands, as every silo reads it afterwards, and the
// journal shows no two activations of the agent at once.
func TestClusterStateFencedSave(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	const addr = "StateProbe:test:fenced"
	paused := siloIndex(t, c, c.Owner(addr))
	pausedName := c.Silo(paused).Name
	clients := make([]*client.Client, c.Len())
	for i := range clients {
		clients[i] = c.Client(t, i) // through this silo's gateway only
	}
	ask := func(via int, text string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		r, err := clients[via].Ask(ctx, addr, &client.Message{Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}
	if got, err := ask(paused, "set first"); err != nil || got != "first" {
		t.Fatalf("set first via %s = %q, %v", pausedName, got, err)
	}

	// Hold a turn that has loaded "first" and its etag until release
	// exists.
	release := filepath.Join(t.TempDir(), "release")
	loaded := probeTurns(t, c, addr, pausedName)
	held := make(chan error, 1)
	go func() {
		_, err := ask(paused, "hold stale "+release)
		held <- err
	}()
	waitProbeTurns(t, c, addr, pausedName, loaded+1)

	c.Freeze(paused)
	c.WaitGone(pausedName)
	survivor := siloIndex(t, c, c.Owner(addr))
	if survivor == paused {
		t.Fatalf("%s still owns %s once gone", pausedName, addr)
	}
	if got, err := ask(survivor, "set survivor"); err != nil || got != "survivor" {
		t.Fatalf("set survivor via %s = %q, %v", c.Silo(survivor).Name, got, err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pid := c.PID(paused)
	c.Thaw(paused)
	// Resumed, it finds itself fenced and its process starts a new silo.
	c.WaitLog(paused, `"msg":"fenced"`)
	// The held Ask ends by its 60 s deadline at the latest.
	if err := <-held; err == nil {
		t.Errorf("the held Ask on %s succeeded: its save landed after the agent moved", pausedName)
	} else {
		t.Logf("the held Ask on %s: %v", pausedName, err)
	}
	// Resumed, the silo runs its held turn and is torn down: both start at
	// once, and the teardown may come first (a fenced silo stops as a crash
	// would). So the held save may not have run; if it did, it was refused.
	saves := probeSaves(t, c.Silo(paused).LogPath, addr, "stale")
	if len(saves) > 1 {
		t.Errorf("%s logged %d saves of %q, want the held one at most: %v", pausedName, len(saves), "stale", saves)
	}
	for _, save := range saves {
		if code := save["code"]; code != codes.Unavailable.String() && code != codes.Aborted.String() {
			t.Errorf("the held save on %s returned %v, want Unavailable (fenced) or Aborted (a conflict)", pausedName, save)
		}
		t.Logf("the held save on the fenced %s: %v: %v", pausedName, save["code"], save["err"])
	}
	if len(saves) == 0 {
		t.Logf("%s was torn down before its held turn reached the save", pausedName)
	}

	if got, err := ask(survivor, "get"); err != nil || got != "survivor" {
		t.Errorf("get via %s = %q, %v; want the survivor's write", c.Silo(survivor).Name, got, err)
	}
	c.WaitLog(paused, `"incarnation":1`)
	c.WaitReady(paused)
	if c.PID(paused) != pid {
		t.Errorf("%s: process %d replaced by %d: want it to start its silo again itself", pausedName, pid, c.PID(paused))
	}
	c.WaitMembers(c.Len())
	for i := range clients {
		clients[i] = c.Client(t, i) // the old client of the restarted silo may be backing off
	}
	for i := range c.Len() {
		if got, err := ask(i, "get"); err != nil || got != "survivor" {
			t.Errorf("get via %s after the restart = %q, %v; want the survivor's write", c.Silo(i).Name, got, err)
		}
	}
	c.CheckJournal()
}

// siloIndex returns the index of the silo named name.
func siloIndex(t *testing.T, c *testcluster.Cluster, name string) int {
	t.Helper()
	i := slices.Index(c.Names(), name)
	if i < 0 {
		t.Fatalf("no silo named %q", name)
	}
	return i
}

// probeTurns counts the journal's turn lines of addr on the silo named
// silo.
func probeTurns(t *testing.T, c *testcluster.Cluster, addr, silo string) int {
	t.Helper()
	b, err := os.ReadFile(c.Journal())
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "turn" && f[1] == addr && f[2] == silo {
			n++
		}
	}
	return n
}

// waitProbeTurns waits until the journal holds n turn lines of addr on
// silo.
func waitProbeTurns(t *testing.T, c *testcluster.Cluster, addr, silo string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for probeTurns(t, c, addr, silo) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d turns of %s on %s in the journal: %v", n, addr, silo, ctx.Err())
		case <-tick.C:
		}
	}
}

// probeSaves returns the "state probe save" records of addr saving value in
// the silo log at path (JSON lines; the harness's own lines are not JSON).
func probeSaves(t *testing.T, path, addr, value string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if rec["msg"] == "state probe save" && rec["agent"] == addr && rec["value"] == value {
			out = append(out, rec)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// counterLoad increments one Counter from several workers, each asking
// again as soon as its last Ask returned, each through its own client of
// every gateway (first a different one per worker), and checks that each
// worker's replies only go up.
type counterLoad struct {
	ok, failed atomic.Int64
	cancel     context.CancelFunc
	done       chan struct{}

	mu        sync.Mutex
	top       int64 // the highest reply
	backwards []string
	codes     map[codes.Code]int
	errs      []error // a sample, for the log
}

func startCounterLoad(t *testing.T, c *testcluster.Cluster, addr string, workers int, perCall time.Duration) *counterLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &counterLoad{cancel: cancel, done: make(chan struct{}), codes: map[codes.Code]int{}}
	var wg sync.WaitGroup
	for w := range workers {
		var order []int
		for j := range c.Len() {
			order = append(order, (w+j)%c.Len())
		}
		cl := c.Client(t, order...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev int64 // a fresh counter's first reply is 1
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, perCall)
				r, err := cl.Ask(cctx, addr, &client.Message{Message: "inc"})
				ccancel()
				if err != nil {
					if ctx.Err() != nil {
						return // stopped: this call's failure is ours
					}
					l.failed.Add(1)
					l.mu.Lock()
					l.codes[errs.Code(err)]++
					if len(l.errs) < 3 {
						l.errs = append(l.errs, err)
					}
					l.mu.Unlock()
					continue
				}
				n, err := strconv.ParseInt(r.Message, 10, 64)
				l.mu.Lock()
				switch {
				case err != nil:
					l.backwards = append(l.backwards, fmt.Sprintf("worker %d: reply %q after %d is not a count", w, r.Message, prev))
				case n <= prev:
					l.backwards = append(l.backwards, fmt.Sprintf("worker %d: reply %d after %d", w, n, prev))
				}
				l.top = max(l.top, n)
				l.mu.Unlock()
				prev = n
				l.ok.Add(1)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-l.done
	})
	return l
}

// waitOK waits until n Asks in all have been answered.
func (l *counterLoad) waitOK(t *testing.T, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for l.ok.Load() < n {
		select {
		case <-ctx.Done():
			t.Fatalf("counter load: %d Asks answered, waiting for %d: %v; failures %v, e.g. %v", l.ok.Load(), n, ctx.Err(), l.codeCounts(), l.sample())
		case <-tick.C:
		}
	}
}

// finish stops the load, fails the test for every reply that was not above
// its worker's previous one and for failures with other codes than allowed,
// and returns the highest reply.
func (l *counterLoad) finish(t *testing.T, allowed ...codes.Code) int64 {
	t.Helper()
	l.cancel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		t.Fatal("counter load: an Ask did not return after its deadline")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.backwards {
		t.Errorf("counter went backwards: %s", b)
	}
	for code, n := range l.codes {
		if !slices.Contains(allowed, code) {
			t.Errorf("counter load: %d Asks failed with %v, want only %v; e.g. %v", n, code, allowed, l.errs)
		}
	}
	return l.top
}

func (l *counterLoad) codeCounts() map[codes.Code]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.codes)
}

func (l *counterLoad) sample() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}
