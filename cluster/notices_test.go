package cluster

import (
	"fmt"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

// toldAll reports whether s has heard from every other member of its view
// that it swept a view holding s (so s asks none of them to release what it
// takes over).
func toldAll(s *Silo) bool {
	r := s.router
	v := r.state.Load().view
	r.smu.Lock()
	defer r.smu.Unlock()
	for _, mi := range v.Members {
		if mi.Name != r.self && r.sweptMe[incarnation{mi.Name, mi.LeaseID}] == 0 {
			return false
		}
	}
	return true
}

// Silos join one at a time, then one leaves gracefully: each view change
// costs swept notices in proportion to the cluster's size (one from each
// member to the joiner and one from the joiner to each, or one from the
// leaving silo to each), not to its square; once they are in, taking over
// new agents asks no silo to release anything; and no address is ever
// active twice.
func TestSweptNoticesLinear(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	var silos []*Silo
	sent := func() int64 {
		var n int64
		for _, s := range silos {
			n += s.router.notices.Load()
		}
		return n
	}
	released := func() int64 {
		var n int64
		for _, s := range silos {
			n += s.router.releases.Load()
		}
		return n
	}
	const size = 6
	var names []string
	for i := range size {
		before := sent()
		name := fmt.Sprintf("s%d", i)
		silos = append(silos, c.start(name))
		names = append(names, name)
		slices.Sort(names)
		c.waitView(names...)
		for _, s := range silos {
			waitFor(t, s.cfg.Name+" told by every member", func() bool { return toldAll(s) })
		}
		n := len(silos)
		got := sent() - before
		t.Logf("join of the silo number %d: %d notices (every silo to every other: %d)", n, got, n*(n-1))
		if limit := int64(2 * (n - 1)); got > limit {
			t.Fatalf("join of the silo number %d: %d swept notices, want at most %d", n, got, limit)
		}
	}
	// Agents activated everywhere now: no silo is asked to release one.
	before := released()
	for i := range 30 {
		if _, err := ask(t.Context(), silos[i%size], fmt.Sprintf("Probe:test:n%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := released() - before; got != 0 {
		t.Fatalf("%d release requests for agents activated after every silo swept", got)
	}
	// A graceful leave: the leaving silo tells each member once it swept.
	before = sent()
	c.stop("s5")
	c.waitView(names[:size-1]...)
	if got, limit := sent()-before, int64(2*(size-1)); got > limit {
		t.Fatalf("graceful leave: %d swept notices, want at most %d", got, limit)
	}
	for i := range 30 {
		if _, err := ask(t.Context(), silos[i%(size-1)], fmt.Sprintf("Probe:test:n%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.l.check(t)
}

// A swept notice counts for the run of the silo that sent it: one from an
// earlier run of a silo that restarted (delivered late) says nothing of
// what the new run holds, so a takeover still asks the new run to release
// while it may hold an address (here: while it leaves and has not swept).
func TestSweptNoticeOfEarlierRun(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	a := c.start("a")
	c.start("b")
	c.waitView("a", "b")
	old := c.silos["b"].router.m.Self().LeaseID
	c.stop("b")
	c.waitView("a")
	b := c.start("b")
	c.waitView("a", "b")
	r := a.router
	v := r.state.Load().view
	mi, ok := v.Member("b")
	if !ok || mi.LeaseID == old || mi.LeaseID != b.router.m.Self().LeaseID {
		t.Fatalf("view %v: want b's new run (lease %d, the earlier %d)", v.Members, b.router.m.Self().LeaseID, old)
	}
	// A newer view in which b's new run leaves, and has not swept it; the
	// earlier run's notice (late) claims that view swept.
	next := v
	next.Version += 10
	leaving := mi
	leaving.Leaving = true
	r.noteSwept("b", next.Version, fmt.Sprintf("%d %d", r.m.Self().LeaseID, old))
	r.smu.Lock()
	mayHold := r.mayHoldLocked(leaving, next)
	r.smu.Unlock()
	if !mayHold {
		t.Fatal("a notice of b's earlier run counted for its new run: a takeover would not ask it to release")
	}
	// The new run's own notice counts.
	r.noteSwept("b", next.Version, fmt.Sprintf("%d %d", r.m.Self().LeaseID, mi.LeaseID))
	r.smu.Lock()
	mayHold = r.mayHoldLocked(leaving, next)
	r.smu.Unlock()
	if mayHold {
		t.Fatal("b's new run reported sweeping the view, yet may hold")
	}
	c.l.check(t)
}
