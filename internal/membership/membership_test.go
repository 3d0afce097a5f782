package membership

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

const waitTimeout = testutil.WaitTimeout

func leakOptions() []goleak.Option { return testutil.LeakOptions() }

func testLogger() *slog.Logger { return testutil.Logger() }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

func newTestMember(t *testing.T, cli *clientv3.Client, name string, ttl time.Duration, join ...string) *Membership {
	t.Helper()
	return startMember(t, Config{
		Name:        name,
		PeerAddr:    "127.0.0.1:1" + name[len(name)-1:],
		GatewayAddr: "127.0.0.1:2" + name[len(name)-1:],
		GossipAddr:  "127.0.0.1:0",
		Join:        join,
		Client:      cli,
		Prefix:      testPrefix,
		LeaseTTL:    ttl,
		Logger:      testLogger(),
	})
}

const testPrefix = "/t/"

// startMember makes and starts a membership; the test fails if it cannot.
func startMember(t *testing.T, cfg Config) *Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	if err := m.Start(ctx); err != nil {
		m.Close()
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	return m
}

// verifyNoLeaks checks, after every other cleanup of the test (the etcd
// server's among them), that no goroutine started by the test is left.
func verifyNoLeaks(t *testing.T) {
	opts := leakOptions()
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// waitMembers waits until every membership's view has exactly want and all
// agree on the version, and every gossip group has len(want) members.
func waitMembers(t *testing.T, ms []*Membership, want ...string) {
	t.Helper()
	waitFor(t, "views of "+strings.Join(want, ","), func() bool {
		var version int64
		for i, m := range ms {
			v := m.View()
			if !slices.Equal(v.Names(), want) {
				return false
			}
			if i == 0 {
				version = v.Version
			} else if v.Version != version {
				return false
			}
		}
		return true
	})
	waitFor(t, "gossip groups", func() bool {
		for _, m := range ms {
			if m.ml.NumMembers() != len(want) {
				return false
			}
		}
		return true
	})
}

func notFenced(t *testing.T, ms ...*Membership) {
	t.Helper()
	for _, m := range ms {
		select {
		case <-m.Fenced():
			t.Errorf("%s fenced: %v", m.Self().Name, m.FenceCause())
		default:
		}
	}
}

// Three silos join through seeds and agree on the view; a graceful Leave
// removes one from every view at once, and its addresses can be taken over
// without waiting.
func TestMembershipJoinAndLeave(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)

	a := newTestMember(t, cli, "silo-a", 0)
	defer a.Close()
	views, cancel := a.Subscribe()
	defer cancel()
	b := newTestMember(t, cli, "silo-b", 0, a.Self().GossipAddr)
	defer b.Close()
	c := newTestMember(t, cli, "silo-c", 0, a.Self().GossipAddr, b.Self().GossipAddr)
	defer c.Close()
	all := []*Membership{a, b, c}
	waitMembers(t, all, "silo-a", "silo-b", "silo-c")

	v := a.View()
	if v.Version <= 0 {
		t.Fatalf("view version %d", v.Version)
	}
	for _, m := range all {
		mi, ok := v.Member(m.Self().Name)
		if !ok || mi != m.Self() {
			t.Fatalf("record of %s = %+v, want %+v", m.Self().Name, mi, m.Self())
		}
		if mi.LeaseID == 0 || mi.GossipAddr == "127.0.0.1:0" || mi.StartTime.IsZero() || mi.PeerAddr == "" || mi.GatewayAddr == "" {
			t.Fatalf("incomplete record %+v", mi)
		}
		if _, ok := a.TakeoverAt(mi.Name); ok {
			t.Fatalf("TakeoverAt(%s) ok while it is a member", mi.Name)
		}
	}
	// The subscriber saw views in version order, ending with the current one.
	var last View
	for last.Version != v.Version {
		next := <-views
		if next.Version < last.Version {
			t.Fatalf("subscriber got version %d after %d", next.Version, last.Version)
		}
		last = next
	}
	if !slices.Equal(last.Names(), v.Names()) {
		t.Fatalf("subscriber's view %v, want %v", last.Names(), v.Names())
	}

	before := time.Now()
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "silo-b gone from every view", func() bool {
		for _, m := range all {
			if _, in := m.View().Member("silo-b"); in {
				return false
			}
		}
		return true
	})
	for _, m := range []*Membership{a, c} {
		at, ok := m.TakeoverAt("silo-b")
		if !ok || at.Before(before) || at.After(time.Now()) {
			t.Fatalf("TakeoverAt(silo-b) after a graceful leave = %v, %v; want between %v and now", at, ok, before)
		}
	}
	waitMembers(t, []*Membership{a, c}, "silo-a", "silo-c")
	notFenced(t, a, b, c)
	for _, m := range all {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := <-views; ok {
		// A view may still be buffered; the channel is closed after it.
		if _, ok := <-views; ok {
			t.Fatal("subscriber channel not closed by Close")
		}
	}
}

// A silo that dies without leaving (gossip stopped, keepalives stopped) is
// removed from the view by the survivors through gossip detection: its
// lease TTL is 60 s, far beyond the wait, so expiry cannot be what removed
// it.
func TestMembershipCrashDetected(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)

	const ttl = 60 * time.Second
	a := newTestMember(t, cli, "silo-a", ttl)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", ttl, a.Self().GossipAddr)
	defer b.Close()
	c := newTestMember(t, cli, "silo-c", ttl, b.Self().GossipAddr)
	defer c.Close()
	waitMembers(t, []*Membership{a, b, c}, "silo-a", "silo-b", "silo-c")

	crashed := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, []*Membership{a, b}, "silo-a", "silo-b")
	if time.Since(crashed) >= ttl {
		t.Fatal("silo-c left the view only when its lease expired")
	}
	// Not a graceful leave: its addresses wait until it is certainly fenced.
	for _, m := range []*Membership{a, b} {
		at, ok := m.TakeoverAt("silo-c")
		if !ok || !at.After(crashed.Add(c.Self().FenceAfter)) {
			t.Fatalf("TakeoverAt(silo-c) = %v, %v; want after %v", at, ok, crashed.Add(c.Self().FenceAfter))
		}
	}
	// The revocation was recorded before it was made.
	r, err := cli.Get(t.Context(), a.revokedKey(clientv3.LeaseID(c.Self().LeaseID)))
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "silo-c" {
		t.Fatalf("record of the revocation of silo-c's lease: %v, %v", r, err)
	}
	notFenced(t, a, b)
}

// A silo that dies without leaving, with a lease of 3 s: gossip declares
// it dead, but its lease is no longer renewed and expires before its fence
// after a revocation would end, so the survivors leave it to expire
// (nothing records a revocation) and take over its addresses as soon as
// the record goes: it fenced itself before the expiry.
func TestMembershipExpiredTakenOverAtOnce(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)

	const ttl = 3 * time.Second
	a := newTestMember(t, cli, "silo-a", ttl)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", ttl, a.Self().GossipAddr)
	defer b.Close()
	c := newTestMember(t, cli, "silo-c", ttl, b.Self().GossipAddr)
	defer c.Close()
	waitMembers(t, []*Membership{a, b, c}, "silo-a", "silo-b", "silo-c")

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, []*Membership{a, b}, "silo-a", "silo-b")
	seen := time.Now()
	lease := clientv3.LeaseID(c.Self().LeaseID)
	if r, err := cli.Get(t.Context(), a.revokedKey(lease)); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("silo-c's lease was revoked (%v, %v): want it left to expire", r, err)
	}
	for _, m := range []*Membership{a, b} {
		at, ok := m.TakeoverAt("silo-c")
		if !ok || at.After(seen) {
			t.Fatalf("TakeoverAt(silo-c) = %v, %v; want at its departure, before %v", at, ok, seen)
		}
		if p := m.Pending(); len(p) != 0 {
			t.Fatalf("Pending() = %v, want none", p)
		}
	}
	notFenced(t, a, b)
}

// A member record deleted by hand while its lease lives is not taken for
// an expiry: takeover waits for the silo's fence.
func TestMembershipDeletedRecordIsNoExpiry(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)

	a := newTestMember(t, cli, "silo-a", 3*time.Second)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", 3*time.Second, a.Self().GossipAddr)
	defer b.Close()
	waitMembers(t, []*Membership{a, b}, "silo-a", "silo-b")
	deleted := time.Now()
	if _, err := cli.Delete(t.Context(), testPrefix+"members/silo-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "silo-b out of silo-a's view", func() bool { _, in := a.View().Member("silo-b"); return !in })
	at, ok := a.TakeoverAt("silo-b")
	if !ok || !at.After(deleted.Add(b.Self().FenceAfter)) {
		t.Fatalf("TakeoverAt(silo-b) = %v, %v; want after %v", at, ok, deleted.Add(b.Self().FenceAfter))
	}
	waitFenced(t, b)
}

// A silo whose lease is revoked by others fences itself.
func TestMembershipFencedOnRevoke(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	a := newTestMember(t, cli, "silo-a", 60*time.Second)
	defer a.Close()
	mi, _ := a.View().Member("silo-a")
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(mi.LeaseID)); err != nil {
		t.Fatal(err)
	}
	waitFenced(t, a)
	waitFor(t, "silo-a gone from its own view", func() bool { return len(a.View().Members) == 0 })
}

// A silo that cannot reach etcd is suspended (after FenceAfter without a
// successful keepalive, strictly before its lease could expire), not
// fenced: turns wait (WaitValid) rather than fail. When etcd answers again
// with its lease alive (a restarted etcd restarts every lease's TTL), the
// silo serves again under the same lease.
func TestMembershipSuspendedWhileEtcdIsGone(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	// A TTL well past the time etcd takes to stop (up to its request
	// timeout, 7 s, for open watches): etcd that is still stopping expires
	// leases as it would for a silo cut off from it.
	a := newTestMember(t, cli, "silo-a", 15*time.Second)
	defer a.Close()
	lease := a.Self().LeaseID
	e.Stop()
	waitFor(t, "silo-a suspended", func() bool { return a.Suspended() || isFenced(a) })
	notFenced(t, a)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.WaitValid(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitValid(cancelled ctx) of a suspended silo = %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	bounded := testutil.WaitContext(t)
	go func() { waited <- a.WaitValid(bounded) }()
	e.Restart()
	if err := <-waited; err != nil {
		t.Fatalf("WaitValid after etcd came back = %v, want nil", err)
	}
	if !a.Valid() || a.Suspended() {
		t.Fatalf("after a successful renewal: valid %t, suspended %t", a.Valid(), a.Suspended())
	}
	notFenced(t, a)
	if mi, ok := a.View().Member("silo-a"); !ok || mi.LeaseID != lease {
		t.Fatalf("silo-a's record after the suspension: %+v (in view %t), want lease %x", mi, ok, lease)
	}
}

// checkRecord, run before a suspended silo resumes, refuses a record that
// left etcd while its lease lived (deleted by hand).
func TestMembershipCheckRecord(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	a := newTestMember(t, cli, "silo-a", 60*time.Second)
	defer a.Close()
	if err := a.checkRecord(t.Context()); err != nil {
		t.Fatalf("checkRecord with the record in place: %v", err)
	}
	if _, err := cli.Delete(t.Context(), a.key); err != nil {
		t.Fatal(err)
	}
	if err := a.checkRecord(t.Context()); !errors.Is(err, errRecordGone) {
		t.Fatalf("checkRecord after the record was deleted = %v, want errRecordGone", err)
	}
	waitFenced(t, a)
}

// A silo that crashed and comes back under the same name (on another gossip
// port, with a new lease) waits for its predecessor's record to go, which
// gossip detection removes well before the 60 s lease TTL, and then takes
// its place in the view and in the gossip group.
func TestMembershipRestartSameName(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	const ttl = 60 * time.Second
	a := newTestMember(t, cli, "silo-a", ttl)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", ttl, a.Self().GossipAddr)
	defer b.Close()
	waitMembers(t, []*Membership{a, b}, "silo-a", "silo-b")

	crashed := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := newTestMember(t, cli, "silo-b", ttl, a.Self().GossipAddr)
	defer b2.Close()
	if time.Since(crashed) >= ttl {
		t.Fatal("the predecessor's record went only when its lease expired")
	}
	if b2.Self().LeaseID == b.Self().LeaseID {
		t.Fatal("restarted silo reuses its predecessor's lease")
	}
	waitMembers(t, []*Membership{a, b2}, "silo-a", "silo-b")
	if mi, _ := a.View().Member("silo-b"); mi != b2.Self() {
		t.Fatalf("silo-a sees %+v, want %+v", mi, b2.Self())
	}
	notFenced(t, a, b2)
}

func waitFenced(t *testing.T, m *Membership) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-m.Fenced():
	case <-timer.C:
		t.Fatal("not fenced")
	}
	if m.FenceCause() == nil {
		t.Fatal("fenced without a cause")
	}
}

func TestMembershipBadConfig(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	for _, cfg := range []Config{
		{Name: "", Client: cli},
		{Name: "a/b", Client: cli},
		{Name: "a"},
		{Name: "a", Client: cli, GossipAddr: "nohost"},
		{Name: "a", Client: cli, GossipAddr: "localhost:0"},
		{Name: "a", Client: cli, LeaseTTL: 5 * time.Second, FenceAfter: 5 * time.Second},
		{Name: "a", Client: cli, LeaseTTL: time.Millisecond},
	} {
		if _, err := New(cfg); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("New(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
	// The gossip port is taken: an error, the lease is given back, nothing
	// keeps running.
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := New(Config{Name: "a", Client: cli, Prefix: testPrefix, GossipAddr: l.LocalAddr().String(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err == nil {
		t.Fatal("Start on a taken gossip port: no error")
	}
	m.Close()
	leases, err := cli.Leases(t.Context())
	if err != nil || len(leases.Leases) != 0 {
		t.Fatalf("leases after a failed New = %v, %v; want none", leases, err)
	}
}

func TestExpandSeeds(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	got := expandSeeds(t.Context(), net.DefaultResolver, []string{"10.0.0.1:7000", " 10.0.0.2", "[::1]:7001", "localhost:7002", "10.0.0.1:7000", "", "no-such-host.invalid:1"}, "7946", testLogger())
	for _, want := range []string{"10.0.0.1:7000", "10.0.0.2:7946", "[::1]:7001", "127.0.0.1:7002"} {
		if !slices.Contains(got, want) {
			t.Errorf("expandSeeds = %v, missing %s", got, want)
		}
	}
	if n := len(got); n != len(slices.Compact(slices.Sorted(slices.Values(got)))) {
		t.Errorf("expandSeeds = %v: duplicates", got)
	}
	for _, s := range got {
		if s == "no-such-host.invalid:1" || s == "" {
			t.Errorf("expandSeeds = %v: kept %q", got, s)
		}
	}
}

// A silo paused past its fence (the clock jumps, as after SIGSTOP or a long
// GC) is suspended, and serves again once a renewal succeeds: its lease
// lived, so no one could take its addresses over. Until then, keepalives
// keep it valid. One whose lease is gone by then fences itself.
func TestMembershipPausedPastFence(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	fake := clock.NewFake(time.Now())
	m := startMember(t, Config{
		Name: "silo-a", PeerAddr: "127.0.0.1:1", GossipAddr: "127.0.0.1:0",
		Client: cli, Prefix: testPrefix, LeaseTTL: 60 * time.Second,
		Logger: testLogger(), Clock: fake,
	})
	defer m.Close()
	fenceAfter := m.Self().FenceAfter

	// Keepalives every FenceAfter/4 succeed: advancing the clock by less
	// than FenceAfter at a time, well past FenceAfter in all, keeps it valid.
	for range 8 {
		waitTimer(t, fake)
		fake.Advance(fenceAfter / 4)
		waitFor(t, "a keepalive", func() bool {
			n, _ := fake.Waiting()
			return n > 0 || !m.Valid()
		})
		if !m.Valid() {
			t.Fatalf("not valid after a successful keepalive: %v", m.FenceCause())
		}
	}
	// Whether it is seen invalid before its keepalive loop renews is a
	// race with that loop; that the loop found it past its bound is not.
	waitTimer(t, fake)
	fake.Advance(fenceAfter)
	waitFor(t, "a suspension", func() bool { return m.suspensions.Load() == 1 })
	if err := m.WaitValid(testutil.WaitContext(t)); err != nil {
		t.Fatalf("WaitValid after a pause past the fence, the lease alive: %v", err)
	}
	notFenced(t, m)

	// Paused past the fence again, with the lease revoked meanwhile.
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(m.Self().LeaseID)); err != nil {
		t.Fatal(err)
	}
	waitTimer(t, fake)
	fake.Advance(fenceAfter)
	if err := m.WaitValid(testutil.WaitContext(t)); err == nil || errs.Code(err) != codes.Unavailable {
		t.Fatalf("WaitValid with the lease gone = %v, want Unavailable", err)
	}
	waitFenced(t, m)
}

// waitTimer waits until the code under test has set a timer on fake.
func waitTimer(t *testing.T, fake *clock.Fake) {
	t.Helper()
	waitFor(t, "a timer", func() bool { n, _ := fake.Waiting(); return n > 0 })
}

// The fence bound is the lease's real life: its TTL (whole seconds) less 1%
// and 250 ms; a FenceAfter of one's own may only shorten it.
func TestMembershipFenceBound(t *testing.T) {
	if got, want := LeaseBound(10*time.Second), 9650*time.Millisecond; got != want {
		t.Errorf("LeaseBound(10s) = %v, want %v", got, want)
	}
	cli := &clientv3.Client{} // fill only checks that there is one
	for _, tc := range []struct {
		ttl, fence, want time.Duration
	}{
		{0, 0, LeaseBound(DefaultLeaseTTL)},
		{2500 * time.Millisecond, 0, LeaseBound(3 * time.Second)},
		{10 * time.Second, 2 * time.Second, 2 * time.Second},
		{2500 * time.Millisecond, 2900 * time.Millisecond, LeaseBound(3 * time.Second)},
	} {
		cfg := Config{Name: "a", Client: cli, LeaseTTL: tc.ttl, FenceAfter: tc.fence}
		if err := cfg.fill(); err != nil {
			t.Fatalf("fill(ttl %v, fence %v): %v", tc.ttl, tc.fence, err)
		}
		if cfg.FenceAfter != tc.want {
			t.Errorf("ttl %v, fence %v: FenceAfter = %v, want %v", tc.ttl, tc.fence, cfg.FenceAfter, tc.want)
		}
		if iv := KeepAliveInterval(cfg.FenceAfter); iv <= 0 || iv > time.Second || 2*iv >= cfg.FenceAfter {
			t.Errorf("KeepAliveInterval(%v) = %v", cfg.FenceAfter, iv)
		}
	}
}

func isFenced(m *Membership) bool {
	select {
	case <-m.Fenced():
		return true
	default:
		return false
	}
}
