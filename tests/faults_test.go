package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The fault tests: etcd failures, resets, with real processes
// (etcd from Debian's etcd-server package), journal-checked.

// TestEtcdLeaderKilled: killing the leader of a three-member etcd (a
// routine leader change) fences no silo and fails no Ask.
func TestEtcdLeaderKilled(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints()})
	addrs := journalAddrs("etcdleader", 60)
	l := startLoad(t, c, addrs, 6, 5*time.Second)
	l.waitOK(t, 200)
	pids := pidsOf(c)
	leases := newLeaseWatch(t, c, e.Endpoints())
	e.Kill(e.Leader())
	e.Leader()
	leases.waitRenewed(t, time.Now())
	l.waitOK(t, l.ok.Load()+200)
	l.finish(t)
	t.Logf("etcd leader killed under load: %d asks answered, %d failed %v, e.g. %v", l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample())
	noFence(t, c, pids)
	c.CheckJournal()
}

// TestEtcdNoLeaderPastTheTTL: the etcd leader killed and the two other
// members frozen for longer than the lease TTL, so that no renewal can
// succeed past every silo's fence bound: each silo is suspended (its turns
// wait), none fences, and no Ask fails, since the member that becomes
// leader when they thaw restarts every lease's TTL; each silo resumes
// under the lease it had.
func TestEtcdNoLeaderPastTheTTL(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints()})
	addrs := journalAddrs("etcdnoleader", 60)
	// Asks outlast the outage and an election: they wait, not fail.
	l := startLoad(t, c, addrs, 6, 30*time.Second)
	l.waitOK(t, 200)
	pids := pidsOf(c)
	leases := newLeaseWatch(t, c, e.Endpoints())
	e.Kill(e.Leader())
	e.Freeze(true)
	for i := range c.Len() {
		c.WaitLog(i, `"msg":"suspended`)
	}
	// Past the TTL (2 s by default): a fault's length, not an assertion.
	hold(t, 2*membership.DefaultLeaseTTL)
	e.Freeze(false)
	e.Leader()
	for i := range c.Len() {
		c.WaitLog(i, `"msg":"resumed`)
	}
	leases.waitRenewed(t, time.Now())
	l.waitOK(t, l.ok.Load()+200)
	l.finish(t)
	t.Logf("no etcd leader for %v under load: %d asks answered, %d failed %v, e.g. %v", 2*membership.DefaultLeaseTTL, l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample())
	noFence(t, c, pids)
	c.CheckJournal()
}

// TestEtcdShortOutage: etcd unreachable (every member frozen: connections
// hang) for well under the lease TTL fences no silo and fails no Ask.
func TestEtcdShortOutage(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints()})
	addrs := journalAddrs("etcdshort", 60)
	l := startLoad(t, c, addrs, 6, 5*time.Second)
	l.waitOK(t, 200)
	pids := pidsOf(c)
	leases := newLeaseWatch(t, c, e.Endpoints())
	// The outage lasts half the fence bound of the default TTL: a fault's
	// length, not an assertion.
	outage := membership.LeaseBound(membership.DefaultLeaseTTL) / 2
	e.Freeze(true)
	hold(t, outage)
	e.Freeze(false)
	e.Leader()
	leases.waitRenewed(t, time.Now())
	l.waitOK(t, l.ok.Load()+200)
	l.finish(t)
	t.Logf("etcd unreachable for %v under load: %d asks answered, %d failed %v, e.g. %v", outage, l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample())
	noFence(t, c, pids)
	c.CheckJournal()
}

// TestEtcdLongOutage: etcd unreachable (every member frozen, the leader
// with them, so it expires the leases when it resumes) for longer than the
// lease TTL suspends every silo and then fences it when etcd answers that
// its lease is gone, as designed; each silo process starts its silo again
// under a new lease by itself (no supervisor: the processes are the same),
// and the agents answer again.
func TestEtcdLongOutage(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	const ttl = 3 * time.Second
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints(), Args: []string{"--lease-ttl", ttl.String()}})
	addrs := journalAddrs("etcdlong", 30)
	l := startLoad(t, c, addrs, 6, 2*time.Second)
	l.waitOK(t, 200)
	pids := pidsOf(c)
	e.Freeze(true)
	for i := range c.Len() {
		c.WaitLog(i, `"msg":"suspended`)
	}
	// Past the lease's expiry, so that etcd expires the leases when it
	// resumes: a fault's length, not an assertion.
	hold(t, ttl)
	e.Freeze(false)
	for i := range c.Len() {
		c.WaitLog(i, `"incarnation":1`)
		c.WaitReady(i)
	}
	c.WaitMembers(c.Len())
	c.WaitOwners(addrs...)
	n := l.ok.Load()
	l.waitOK(t, n+200)
	l.finish(t, codes.Unavailable, codes.DeadlineExceeded)
	t.Logf("etcd unreachable past the lease TTL under load: %d asks answered, %d failed %v", l.ok.Load(), l.failed.Load(), l.codeCounts())
	for i, pid := range pids {
		if c.PID(i) != pid || !c.Running(i) {
			t.Errorf("%s: process %d replaced by %d (running %t): want the same process to start its silo again", c.Silo(i).Name, pid, c.PID(i), c.Running(i))
		}
	}
	c.CheckJournal()
}

// TestClusterResetIsNoProofOfDeath: a silo whose peer and gossip TCP ports
// answer with resets (a firewall rejecting with tcp-reset, or a failed
// listener), while it is alive, holds its lease and gossips over UDP, is
// not removed and not replaced: a reset alone is no proof of death. Its
// agents stay its own (journal-checked: no overlaps).
func TestClusterResetIsNoProofOfDeath(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("reset", 60)
	c.WaitOwners(addrs...)
	const victim = 2
	pid := c.PID(victim)
	l := startLoad(t, c, addrs, 6, 2*time.Second)
	l.waitOK(t, 200)
	c.Reject(victim, true)
	// Both survivors saw their streams to the victim break, dialled it,
	// were refused, and did not take the reset for a death.
	for i := range victim {
		c.WaitLog(i, "no proof of death")
	}
	// Long enough for gossip to have declared it dead, were its UDP
	// probes failing too: a fault's length, not an assertion.
	hold(t, 3*time.Second)
	c.WaitMembers(c.Len())
	for i := range victim {
		if strings.Contains(c.LogTail(i, 1000), "removed a silo from the view") {
			t.Errorf("%s removed a silo whose peer port answered with resets", c.Silo(i).Name)
		}
	}
	c.Reject(victim, false)
	c.WaitOwners(addrs...)
	l.waitOK(t, l.ok.Load()+200)
	l.finish(t, codes.Unavailable, codes.DeadlineExceeded)
	t.Logf("peer ports answering with resets under load: %d asks answered, %d failed %v", l.ok.Load(), l.failed.Load(), l.codeCounts())
	noFence(t, c, map[int]int{victim: pid})
	c.CheckJournal()
}

// hold lets a fault last d.
func hold(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
	}
}

func pidsOf(c *testcluster.Cluster) map[int]int {
	pids := map[int]int{}
	for i := range c.Len() {
		pids[i] = c.PID(i)
	}
	return pids
}

// noFence checks that no silo of pids fenced, and each still runs as the
// same process.
func noFence(t *testing.T, c *testcluster.Cluster, pids map[int]int) {
	t.Helper()
	for i, pid := range pids {
		b, err := os.ReadFile(c.Silo(i).LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"msg":"fenced"`) {
			t.Errorf("%s fenced", c.Silo(i).Name)
		}
		if c.PID(i) != pid || !c.Running(i) {
			t.Errorf("%s: process %d is gone", c.Silo(i).Name, pid)
		}
	}
}

// leaseWatch follows the remaining TTL of every silo's lease in etcd.
type leaseWatch struct {
	cli    *clientv3.Client
	leases map[string]clientv3.LeaseID
}

func newLeaseWatch(t *testing.T, c *testcluster.Cluster, endpoints []string) *leaseWatch {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	resp, err := cli.Get(t.Context(), c.EtcdPrefix()+"members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	w := &leaseWatch{cli: cli, leases: map[string]clientv3.LeaseID{}}
	for _, kv := range resp.Kvs {
		var mi membership.Member
		if err := json.Unmarshal(kv.Value, &mi); err != nil {
			t.Fatal(err)
		}
		w.leases[mi.Name] = clientv3.LeaseID(mi.LeaseID)
	}
	if len(w.leases) != c.Len() {
		t.Fatalf("%d member records, want %d", len(w.leases), c.Len())
	}
	return w
}

// waitRenewed waits until every silo's lease was renewed after since, a
// time after any etcd leader election that may have extended it (a new
// leader extends every lease by its TTL plus an election timeout, 1 s):
// from 3 s after since on, a lease left alone has at most TTL-2 s left,
// which etcd reports (whole seconds, rounded down) as TTL-2 or less; one
// it reports with TTL-1 or more was renewed, by its silo's keepalive.
func (w *leaseWatch) waitRenewed(t *testing.T, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	last := map[string]int64{}
	renewed := map[string]bool{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(renewed) < len(w.leases) {
		for name, id := range w.leases {
			at := time.Now()
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			r, err := w.cli.TimeToLive(qctx, id)
			qcancel()
			if err != nil || r.TTL <= 0 {
				continue
			}
			if at.Sub(since) >= 3*time.Second && r.TTL >= r.GrantedTTL-1 {
				renewed[name] = true
			}
			last[name] = r.TTL
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for every silo's lease to be renewed: %v; renewed: %v, remaining TTLs: %v", ctx.Err(), renewed, fmt.Sprint(last))
		case <-tick.C:
		}
	}
}

// TestClusterCPUHogsFenceNothing: a healthy three-silo cluster under Ask
// load, beside busy processes (three per core, each spinning on a core of
// its own as `yes > /dev/null` does), for a while: no silo fences, none is
// removed from the view or taken over, and no Ask fails (journal-checked:
// no overlaps). The silos run with the default lease (2 s: a fence bound
// of 1.73 s, keepalives every 288 ms, each bounded by two intervals),
// where a false fence is likeliest: a loaded silo is slow, not dead, its
// renewals still succeed, and gossip's Lifeguard makes a slow prober probe
// less rather than accuse its peers.
func TestClusterCPUHogsFenceNothing(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	addrs := journalAddrs("hogs", 60)
	l := startLoad(t, c, addrs, 6, 5*time.Second)
	l.waitOK(t, 200)
	pids := pidsOf(c)
	n := 3 * runtime.NumCPU()
	for range n {
		hog := exec.Command("yes")
		hog.Stdout = nil // /dev/null
		if err := hog.Start(); err != nil {
			t.Fatalf("start a CPU hog: %v", err)
		}
		t.Cleanup(func() {
			_ = hog.Process.Kill()
			_ = hog.Wait()
		})
	}
	// The hogs run for several lease TTLs: a fault's length, not an
	// assertion. The load must go on meanwhile.
	start := l.ok.Load()
	hold(t, 20*time.Second)
	l.waitOK(t, start+200)
	l.finish(t)
	t.Logf("%d CPU hogs beside the cluster under load: %d asks answered, %d failed %v, e.g. %v", n, l.ok.Load(), l.failed.Load(), l.codeCounts(), l.sample())
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d Asks failed beside CPU hogs", n)
	}
	noFence(t, c, pids)
	for i := range c.Len() {
		tail := c.LogTail(i, 100000)
		for _, bad := range []string{"removed a silo from the view", "lease expired", "proven dead", "no longer renews its lease"} {
			if strings.Contains(tail, bad) {
				t.Errorf("%s logged %q beside CPU hogs: a healthy silo was taken for dead", c.Silo(i).Name, bad)
			}
		}
	}
	c.WaitMembers(c.Len())
	c.CheckJournal()
}
