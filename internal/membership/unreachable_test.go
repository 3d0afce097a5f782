package membership

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// The rules of an unreachable member (unreachable.go): a member marks
// itself only when a majority of the others report it, and only once they
// report it again after it saw them (stale reports do not count); the mark
// takes it out of the view's owners for good; and of two members that
// report each other, only one marks itself.
func TestUnreachableMarking(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	a := newTestMember(t, cli, "silo-a", 0)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", 0, a.Self().GossipAddr)
	defer b.Close()
	c := newTestMember(t, cli, "silo-c", 0, a.Self().GossipAddr)
	defer c.Close()
	waitMembers(t, []*Membership{a, b, c}, "silo-a", "silo-b", "silo-c")
	ctx := t.Context()
	check := func(m *Membership) []string {
		t.Helper()
		by, err := m.CheckUnreachable(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return by
	}
	report := func(by, about *Membership) {
		t.Helper()
		mi, _ := by.View().Member(about.Self().Name)
		if err := by.ReportUnreachable(ctx, mi); err != nil {
			t.Fatal(err)
		}
	}

	// One of two others is no majority.
	report(a, c)
	if by := check(c); by != nil || c.Unreachable() {
		t.Fatalf("marked on one report of two: %v", by)
	}
	// Two of two: seen, then confirmed only by reports written again.
	report(b, c)
	if by := check(c); by != nil {
		t.Fatalf("marked before the reports were confirmed: %v", by)
	}
	if by := check(c); by != nil {
		t.Fatalf("marked on reports not written again: %v", by)
	}
	// A reporter that reaches c again clears its report: no majority, and
	// the count starts over.
	if err := a.ClearUnreachable(ctx, "silo-c"); err != nil {
		t.Fatal(err)
	}
	if by := check(c); by != nil {
		t.Fatalf("marked on one report: %v", by)
	}
	report(a, c)
	report(b, c)
	if by := check(c); by != nil {
		t.Fatalf("marked before the reports were confirmed: %v", by)
	}
	report(a, c)
	report(b, c)
	// Confirmed, but not yet a grace period after the majority was seen.
	if by, err := c.CheckUnreachable(ctx, time.Hour); by != nil || err != nil {
		t.Fatalf("marked before the grace period: %v, %v", by, err)
	}
	by := check(c)
	slices.Sort(by)
	if !slices.Equal(by, []string{"silo-a", "silo-b"}) || !c.Unreachable() {
		t.Fatalf("not marked on two confirmed reports: %v", by)
	}
	waitFor(t, "silo-c unreachable, and no owner, in every view", func() bool {
		for _, m := range []*Membership{a, b, c} {
			mi, _ := m.View().Member("silo-c")
			if !mi.Unreachable || slices.Contains(m.View().Owners(), "silo-c") {
				return false
			}
		}
		return true
	})
	if err := c.MarkDrained(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "silo-c drained in a's view", func() bool { mi, _ := a.View().Member("silo-c"); return mi.Drained })
	// Reports cleared later do not bring it back.
	if err := a.ClearUnreachable(ctx, "silo-c"); err != nil {
		t.Fatal(err)
	}
	if mi, _ := c.View().Member("silo-c"); !mi.Unreachable || !mi.Drained || slices.Contains(c.View().Owners(), "silo-c") {
		t.Errorf("silo-c after the report cleared: %+v, owners %v", mi, c.View().Owners())
	}

	// a and b now report each other (c, unreachable, does not count): each
	// is reported by all its others. Only the first to mark itself does.
	report(a, b)
	report(b, a)
	check(a)
	check(b)
	report(a, b)
	report(b, a)
	byA, errA := a.CheckUnreachable(context.Background(), 0)
	byB, errB := b.CheckUnreachable(context.Background(), 0)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if (byA == nil) == (byB == nil) || a.Unreachable() == b.Unreachable() {
		t.Fatalf("of two members reporting each other, marked: a %v (%v), b %v (%v); want exactly one", a.Unreachable(), byA, b.Unreachable(), byB)
	}
	notFenced(t, a, b, c)
}

// CheckUnreachableSeen reads etcd only when the reports given name the
// silo under its lease (a cancelled context makes any read fail).
func TestCheckUnreachableSeen(t *testing.T) {
	verifyNoLeaks(t)
	e := etcdtest.Start(t)
	cli := e.Client(t)
	a := newTestMember(t, cli, "silo-a", 0)
	defer a.Close()
	b := newTestMember(t, cli, "silo-b", 0, a.Self().GossipAddr)
	defer b.Close()
	waitMembers(t, []*Membership{a, b}, "silo-a", "silo-b")
	done, cancel := context.WithCancel(t.Context())
	cancel()
	old := Report{Member: "silo-a", By: "silo-b", Lease: a.Self().LeaseID + 1}
	for _, reports := range [][]Report{nil, {{Member: "silo-b", By: "silo-a", Lease: b.Self().LeaseID}}, {old}} {
		if by, err := a.CheckUnreachableSeen(done, 0, reports); by != nil || err != nil {
			t.Errorf("reports %v: %v, %v; want nothing read", reports, by, err)
		}
	}
	if _, err := a.CheckUnreachableSeen(done, 0, []Report{{Member: "silo-a", By: "silo-b", Lease: a.Self().LeaseID}}); err == nil {
		t.Error("a report about the silo: nothing read, want the reports and records read (an error on a cancelled context)")
	}
	// The reports read, as CheckUnreachable counts them: one other of one
	// reports a, first seen, then confirmed.
	mi, _ := b.View().Member("silo-a")
	for range 2 {
		if err := b.ReportUnreachable(t.Context(), mi); err != nil {
			t.Fatal(err)
		}
		reports, err := a.Reports(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		by, err := a.CheckUnreachableSeen(t.Context(), 0, reports)
		if err != nil {
			t.Fatal(err)
		}
		if by != nil {
			if !slices.Equal(by, []string{"silo-b"}) || !a.Unreachable() {
				t.Fatalf("marked by %v (unreachable %t), want silo-b", by, a.Unreachable())
			}
			notFenced(t, a, b)
			return
		}
	}
	t.Fatal("not marked on a confirmed report of the only other member")
}
