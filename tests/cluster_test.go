package tests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The cluster acceptance tests. Each runs three silo processes
// (tests/testcluster) and ends by checking the single-activation invariant
// over the journal the Journal agents write: no two activations of one
// address were ever live at the same time.

// journalAddrs returns n Journal addresses.
func journalAddrs(prefix string, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("Journal:%s:%s-%d", testcluster.Principal, prefix, i)
	}
	return addrs
}

// TestClusterPlacement: calls through every gateway land on the owner that
// cluster.Owner computes over the members, and Agents lists each activation
// on that silo.
func TestClusterPlacement(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	names := c.Names()
	addrs := journalAddrs("place", 60)
	hosts := map[string]int{}
	for i := range c.Len() {
		for _, a := range addrs {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			got, err := c.Ask(ctx, i, a)
			cancel()
			if err != nil {
				t.Fatalf("ask %s via %s: %v", a, c.Silo(i).Name, err)
			}
			if want := cluster.Owner(a, names); got != want {
				t.Errorf("%s via %s answered from %s, want its owner %s", a, c.Silo(i).Name, got, want)
			}
			hosts[got]++
		}
	}
	if len(hosts) != len(names) {
		t.Errorf("agents landed on %v, want all of %v", slices.Sorted(maps.Keys(hosts)), names)
	}
	// Every gateway lists the cluster with each silo's gateway, and the
	// activations cluster-wide with the silo hosting each.
	for via := range c.Len() {
		ms, err := c.Client(t, via).Admin().Members(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		gateways := map[string]string{}
		for _, m := range ms {
			gateways[m.Name] = m.GatewayAddr
		}
		for i := range c.Len() {
			if s := c.Silo(i); gateways[s.Name] != s.GatewayAddr {
				t.Errorf("Members via %s: %s has gateway %q, want %q", c.Silo(via).Name, s.Name, gateways[s.Name], s.GatewayAddr)
			}
		}
	}
	cl := c.Client(t)
	agents, err := cl.Agents().List(t.Context(), "", "Journal")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, a := range agents {
		listed[a.Address] = true
		if want := cluster.Owner(a.Address, names); a.Silo != want {
			t.Errorf("Agents: %s on %s, want %s", a.Address, a.Silo, want)
		}
	}
	for _, a := range addrs {
		if !listed[a] {
			t.Errorf("Agents does not list %s", a)
		}
	}
	c.CheckJournal()
}

// TestClusterKillUnderLoad: kill -9 one silo while clients ask many agents
// with short deadlines. Every Ask returns, with a reply or Unavailable /
// DeadlineExceeded; the dead silo's agents answer again from the survivors.
func TestClusterKillUnderLoad(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("kill", 90)
	const victim = 1
	var moved []string
	for _, a := range addrs {
		if c.Owner(a) == c.Silo(victim).Name {
			moved = append(moved, a)
		}
	}
	l := startLoad(t, c, addrs, 6, 2*time.Second)
	l.waitOK(t, 200)
	c.Kill(victim)
	c.WaitGone(c.Silo(victim).Name)
	c.WaitOwners(moved...)
	// The load goes on through the survivors.
	l.waitOK(t, l.ok.Load()+200)
	l.finish(t, codes.Unavailable, codes.DeadlineExceeded)
	// Only Asks in flight on the victim fail with Unavailable (saying that
	// they may have run): one it never received is sent again, within its
	// deadline.
	if n, may := l.codeCounts()[codes.Unavailable], l.mayHaveRun.Load(); int64(n) > may {
		t.Errorf("%d Asks failed with Unavailable, only %d of them saying they may have run; e.g. %v", n, may, l.sample())
	}
	t.Logf("kill -9 under load: %d asks answered, %d failed %v (%d of them in flight on the victim: they may have run), e.g. %v; %d agents moved; latest return %v after a deadline", l.ok.Load(), l.failed.Load(), l.codeCounts(), l.mayHaveRun.Load(), l.sample(), len(moved), time.Duration(l.late.Load()))
	c.CheckJournal()
}

// TestClusterHungSilo: a silo that stops answering without closing its
// connections (SIGSTOP, as a hung host or a cut network) is found dead by
// gossip, not by refused connections; the survivors take over its agents
// while clients ask, and every Ask returns within its deadline. The hung
// silo is then killed.
func TestClusterHungSilo(t *testing.T) { hungSilo(t, false) }

// TestClusterPausedSilo: as TestClusterHungSilo, but the silo then resumes
// (SIGCONT), as after a long GC or VM pause, with requests still queued in
// it: it must find itself fenced without running a turn of an agent that
// moved (the journal would show the turn overlapping the new activation),
// and start a new silo in its process.
func TestClusterPausedSilo(t *testing.T) { hungSilo(t, true) }

func hungSilo(t *testing.T, resume bool) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("hung", 90)
	const victim = 0
	name := c.Silo(victim).Name
	var moved []string
	for _, a := range addrs {
		if c.Owner(a) == name {
			moved = append(moved, a)
		}
	}
	l := startLoad(t, c, addrs, 6, 2*time.Second)
	l.waitOK(t, 200)
	c.Freeze(victim)
	c.WaitGone(name)
	c.WaitOwners(moved...)
	l.waitOK(t, l.ok.Load()+200)
	if resume {
		c.Thaw(victim)
		c.WaitLog(victim, `"msg":"fenced"`)
		l.waitOK(t, l.ok.Load()+200)
	} else {
		c.Kill(victim) // still frozen: its activations ended at the freeze
	}
	l.finish(t, codes.Unavailable, codes.DeadlineExceeded)
	t.Logf("%s hung under load (resumed: %t): %d asks answered, %d failed %v, e.g. %v; %d agents moved; latest return %v after a deadline",
		name, resume, l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample(), len(moved), time.Duration(l.late.Load()))
	if resume {
		// Its process starts a new silo by itself.
		c.WaitLog(victim, `"incarnation":1`)
		c.WaitReady(victim)
	} else {
		c.Restart(victim)
	}
	c.WaitMembers(c.Len())
	c.CheckJournal()
}

// TestClusterRollingRestart: SIGTERM and restart each silo in turn while
// clients ask, as a StatefulSet rollout does: zero failed Asks. A
// graceful leave hands agents over at once, calls a draining gateway did not
// start are sent again through another, and a restarted silo is dialled
// afresh.
func TestClusterRollingRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("roll", 90)
	l := startLoad(t, c, addrs, 6, 5*time.Second)
	l.waitOK(t, 200)
	for i := range c.Len() {
		c.Stop(i)
		c.WaitGone(c.Silo(i).Name)
		l.waitOK(t, l.ok.Load()+100)
		c.Restart(i)
		c.WaitMembers(c.Len())
		l.waitOK(t, l.ok.Load()+100)
	}
	c.WaitOwners(addrs...)
	l.finish(t, codes.Unavailable)
	t.Logf("rolling restart under load: %d asks answered, %d failed %v, e.g. %v", l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample())
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d Asks failed during the rolling restart", n)
	}
	c.CheckJournal()
}

// TestClusterPartition: a silo cut off from its peers (not from etcd)
// leaves the cluster, and the survivors take over its agents, by whichever
// comes first: gossip declares it dead and it fences itself, or the others
// report its peer port unreachable and it drains itself. The silo process
// starts its silo again under a new lease by itself (the in-process cut
// ends with the silo), and it rejoins.
func TestClusterPartition(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("part", 60)
	c.WaitOwners(addrs...)
	const victim = 2
	pid := c.PID(victim)
	c.Partition(victim, true)
	c.WaitLog(victim, `"incarnation":1`)
	fenced := c.LogContains(victim, `"msg":"fenced"`)
	drained := c.LogContains(victim, `"err":"unreachable: `)
	if !fenced && !drained {
		t.Fatalf("%s started again with neither a fence nor an unreachable drain in its log", c.Silo(victim).Name)
	}
	t.Logf("%s left by: fenced %v, drained as unreachable %v", c.Silo(victim).Name, fenced, drained)
	c.Partition(victim, false) // the new silo is not cut off: marks it Live
	c.WaitMembers(c.Len())
	c.WaitOwners(addrs...)
	if c.PID(victim) != pid || !c.Running(victim) {
		t.Errorf("%s: process %d replaced: want it to start its silo again itself", c.Silo(victim).Name, pid)
	}
	c.CheckJournal()
}

// load asks Journal agents from several goroutines, each through an SDK
// client that knows every gateway (first its own, so each gateway has
// sessions), with a deadline per call.
type load struct {
	ok, failed atomic.Int64
	mayHaveRun atomic.Int64 // failed Asks that were in flight on a silo that died: they may have run
	late       atomic.Int64 // the longest an Ask returned after its deadline, ns (logged, not asserted)
	cancel     context.CancelFunc
	done       chan struct{}

	mu    sync.Mutex
	codes map[codes.Code]int
	errs  []error // a sample of the errors, for the log
}

func startLoad(t *testing.T, c *testcluster.Cluster, addrs []string, workers int, perCall time.Duration) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, done: make(chan struct{}), codes: map[codes.Code]int{}}
	clients := make([]*client.Client, c.Len())
	for i := range clients {
		var order []int
		for j := range c.Len() {
			order = append(order, (i+j)%c.Len())
		}
		clients[i] = c.Client(t, order...)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[w%len(clients)]
			for k := w; ctx.Err() == nil; k++ {
				a := addrs[(k*7)%len(addrs)]
				cctx, ccancel := context.WithTimeout(ctx, perCall)
				deadline, _ := cctx.Deadline()
				_, err := cl.Ask(cctx, a, &client.Message{Message: "load"})
				ccancel()
				for over := time.Since(deadline).Nanoseconds(); ; {
					cur := l.late.Load()
					if over <= cur || l.late.CompareAndSwap(cur, over) {
						break
					}
				}
				if err == nil {
					l.ok.Add(1)
					continue
				}
				if ctx.Err() != nil {
					return // stopped: this call's failure is ours
				}
				l.failed.Add(1)
				if strings.Contains(err.Error(), "may have run") {
					l.mayHaveRun.Add(1)
				}
				l.mu.Lock()
				l.codes[errs.Code(err)]++
				if len(l.errs) < 10 {
					l.errs = append(l.errs, fmt.Errorf("%s: %w", a, err))
				}
				l.mu.Unlock()
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
func (l *load) waitOK(t *testing.T, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for l.ok.Load() < n {
		select {
		case <-ctx.Done():
			t.Fatalf("load: %d asks answered, waiting for %d: %v; failures %v, e.g. %v", l.ok.Load(), n, ctx.Err(), l.codeCounts(), l.sample())
		case <-tick.C:
		}
	}
}

// finish stops the load, checks that every Ask returned (each bounded by its
// own deadline, so the workers end), and that every failure has one of the
// codes allowed.
func (l *load) finish(t *testing.T, allowed ...codes.Code) {
	t.Helper()
	l.cancel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		t.Fatal("load: an Ask did not return after its deadline")
	}
	for code, n := range l.codeCounts() {
		if !slices.Contains(allowed, code) {
			t.Errorf("load: %d Asks failed with %v, want only %v; e.g. %v", n, code, allowed, l.sample())
		}
	}
}

func (l *load) codeCounts() map[codes.Code]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.codes)
}

func (l *load) sample() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}
