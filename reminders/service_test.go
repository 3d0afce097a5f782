package reminders

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

var agent = grain.Address{Type: "Ticker", Owner: "acme", Alias: "t1"}

func TestFiresOnSchedule(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config())
	h.loaded(s)
	due := h.clk.Now().Add(time.Minute)
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute, MessageType: "tick", Message: "payload", Due: due}); err != nil {
		t.Fatal(err)
	}
	var seen uint64
	h.fired(s, 0, &seen)
	h.clk.Advance(time.Minute - time.Millisecond)
	h.fired(s, 0, &seen)
	h.clk.Advance(time.Millisecond)
	msgs := h.fired(s, 1, &seen)
	if m := msgs[0]; m.To != agent.String() || m.From != agent.String() || m.MessageType != "tick" || m.Message != "payload" {
		t.Fatalf("tick = %+v", m)
	}
	h.clk.Advance(time.Minute)
	h.fired(s, 2, &seen)
	// The clock jumps five periods and a half: one tick, not a backlog, and
	// the schedule stays on Due + k*Period.
	h.clk.Advance(5*time.Minute + 30*time.Second)
	h.fired(s, 3, &seen)
	h.clk.Advance(29 * time.Second)
	h.fired(s, 3, &seen)
	h.clk.Advance(time.Second)
	h.fired(s, 4, &seen)

	list, err := s.List(h.ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	want := grain.Reminder{Name: "tick", Period: time.Minute, MessageType: "tick", Message: "payload", Due: due}
	if len(list) != 1 || list[0] != want {
		t.Fatalf("List = %+v, want [%+v]", list, want)
	}
}

func TestUnregisterStops(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config())
	for _, name := range []string{"a", "b"} {
		if err := s.Register(h.ctx, agent, grain.Reminder{Name: name, Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Unregister(h.ctx, agent, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unregister(h.ctx, agent, "a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second Unregister = %v, want NotFound", err)
	}
	h.loaded(s)
	var seen uint64
	h.fired(s, 0, &seen)
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)
	if err := s.Unregister(h.ctx, agent, "b"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(10 * time.Minute)
	h.fired(s, 1, &seen)
	if list, err := s.List(h.ctx, agent); err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v; want none", list, err)
	}
	if st := s.Stats(); st.Reminders != 0 || st.Scheduled != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// A restart of the silo (service and embedded etcd) keeps the reminder; the
// ticks missed while it was down fire once, then the schedule goes on.
func TestSurvivesRestartMissedTicksFireOnce(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config())
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute, MessageType: "tick"}); err != nil {
		t.Fatal(err)
	}
	var seen uint64
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)
	s.Close()
	h.cli.Close()
	h.etcd.Stop()

	h.clk.Advance(5*time.Minute + 10*time.Second) // five ticks missed while down
	h.etcd.Restart()
	h.cli = h.etcd.Client(h.t)
	s = h.start(h.config())
	h.loaded(s)
	seen = 0
	h.fired(s, 1, &seen) // once at recovery
	h.clk.Advance(49 * time.Second)
	h.fired(s, 1, &seen)
	h.clk.Advance(time.Second) // back on Due + k*Period
	h.fired(s, 2, &seen)
}

// etcd goes away: nothing panics, calls that need etcd are Unavailable,
// reminders already loaded keep firing (a clock jump over several periods
// fires once), and after etcd is back on the same data the service takes
// writes again and sees other silos' changes.
func TestEtcdDown(t *testing.T) {
	h := newHarness(t)
	cfg := h.config()
	cfg.OpTimeout = 300 * time.Millisecond
	s := h.start(cfg)
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h.loaded(s)
	h.etcd.Stop() // etcd waits up to 7 s for the watch stream to end

	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "other", Period: time.Minute}); errs.Code(err) != codes.Unavailable {
		t.Fatalf("Register with etcd down = %v, want Unavailable", err)
	}
	if _, err := s.List(h.ctx, agent); errs.Code(err) != codes.Unavailable {
		t.Fatalf("List with etcd down = %v, want Unavailable", err)
	}
	if err := s.Unregister(h.ctx, agent, "tick"); errs.Code(err) != codes.Unavailable {
		t.Fatalf("Unregister with etcd down = %v, want Unavailable", err)
	}
	var seen uint64
	h.clk.Advance(3*time.Minute + time.Second)
	h.fired(s, 1, &seen)

	h.etcd.Restart()
	waitFor(t, "Register to work again", func() bool {
		return s.Register(h.ctx, agent, grain.Reminder{Name: "other", Period: 2 * time.Minute}) == nil
	})
	// Another silo's write reaches this one through the resumed watch.
	other := h.etcd.Client(h.t)
	if _, err := other.Put(h.ctx, "/test/reminders/Ticker:acme:t2/w", `{"period_ms":60000,"due_unix_ms":1}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to deliver the other silo's reminder", func() bool { return s.Stats().Reminders == 3 })
	h.clk.Advance(time.Minute)
	// tick (due), other (first due 2 min after its registration: not yet),
	// w (its ticks are on whole minutes since 1970: due).
	h.fired(s, 3, &seen)
}

func TestBadInputs(t *testing.T) {
	h := newHarness(t)
	cfg := h.config()
	cfg.MinPeriod = time.Minute
	cfg.MaxPayload = 1024
	s := h.start(cfg)
	for _, tc := range []struct {
		what string
		addr grain.Address
		r    grain.Reminder
		code codes.Code
		msg  string
	}{
		{"period too short", agent, grain.Reminder{Name: "r", Period: 59 * time.Second}, codes.InvalidArgument, "minimum 1m0s"},
		{"zero period", agent, grain.Reminder{Name: "r"}, codes.InvalidArgument, "period"},
		{"bad name", agent, grain.Reminder{Name: "a/b", Period: time.Minute}, codes.InvalidArgument, "reminder name"},
		{"empty name", agent, grain.Reminder{Period: time.Minute}, codes.InvalidArgument, "reminder name"},
		{"oversize payload", agent, grain.Reminder{Name: "r", Period: time.Minute, Message: strings.Repeat("x", 1025)}, codes.ResourceExhausted, "over the limit of 1024"},
		{"unknown agent type", grain.Address{Type: "Unknown", Owner: "a", Alias: "b"}, grain.Reminder{Name: "r", Period: time.Minute}, codes.NotFound, "not registered"},
		{"bad address", grain.Address{Type: "Ticker", Owner: "a:b", Alias: "c"}, grain.Reminder{Name: "r", Period: time.Minute}, codes.InvalidArgument, "address"},
		{"reserved type", agent, grain.Reminder{Name: "r", Period: time.Minute, MessageType: "_silo.x"}, codes.InvalidArgument, "reserved"},
	} {
		err := s.Register(h.ctx, tc.addr, tc.r)
		if errs.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Register = %v, want %v containing %q", tc.what, err, tc.code, tc.msg)
		}
	}
	if err := s.Unregister(h.ctx, agent, "nope"); errs.Code(err) != codes.NotFound {
		t.Errorf("Unregister of a missing reminder = %v, want NotFound", err)
	}
	if err := s.Unregister(h.ctx, agent, "a b"); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("Unregister with a bad name = %v, want InvalidArgument", err)
	}
	if st := s.Stats(); st.Reminders != 0 {
		t.Errorf("bad inputs stored something: %+v", st)
	}
}

// Only owned reminders fire; Rebalance moves them, and a takeover fires a
// tick the old owner may have missed once.
func TestOwnership(t *testing.T) {
	h := newHarness(t)
	tv := newTestView(func(int) bool { return false })
	own := func(owned bool) { tv.set(func(int) bool { return owned }) }
	cfg := h.config()
	cfg.View = tv.get
	s := h.start(cfg)
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h.loaded(s)
	var seen uint64
	h.clk.Advance(time.Minute)
	h.fired(s, 0, &seen)
	if st := s.Stats(); st.Reminders != 0 || st.Scheduled != 0 || st.Buckets != 0 {
		t.Fatalf("Stats = %+v", st)
	}

	// Graceful hand-over now: the old owner fired the last tick.
	own(true)
	s.Rebalance(h.clk.Now())
	h.settled(s)
	if st := s.Stats(); st.Reminders != 1 || st.Scheduled != 1 || st.Buckets != Buckets {
		t.Fatalf("Stats = %+v", st)
	}
	h.fired(s, 0, &seen)
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)

	// Moves away (the view in force says no before Rebalance runs):
	// nothing fires.
	own(false)
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)
	s.Rebalance(h.clk.Now())
	h.settled(s)
	if st := s.Stats(); st.Reminders != 0 || st.Scheduled != 0 || st.Buckets != 0 {
		t.Fatalf("Stats = %+v", st)
	}

	// Taken over after the old owner failed 90 s ago: the tick it missed
	// fires once at once.
	lostAt := h.clk.Now().Add(30 * time.Second)
	h.clk.Advance(2 * time.Minute)
	own(true)
	s.Rebalance(lostAt)
	h.settled(s)
	h.fired(s, 2, &seen)
}

// A reminder registered through another Service (another silo) is fired by
// the one that owns the agent.
func TestTwoServices(t *testing.T) {
	h := newHarness(t)
	cfgA, cfgB := h.config(), h.config()
	mine := Bucket(agent)
	cfgA.View = newTestView(func(b int) bool { return b == mine }).get
	cfgB.View = newTestView(func(b int) bool { return b != mine }).get
	a, b := h.start(cfgA), h.start(cfgB)
	h.loaded(a)
	h.loaded(b)
	if err := b.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to see B's reminder", func() bool { return a.Stats().Scheduled == 1 })
	h.clk.Advance(time.Minute)
	var seenA, seenB uint64
	h.fired(a, 1, &seenA)
	h.fired(b, 0, &seenB)
	if err := b.Unregister(h.ctx, agent, "tick"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to see the unregister", func() bool { return a.Stats().Reminders == 0 })
}

// Reminders in etcd before the Service starts are loaded in pages while
// Register already works.
func TestLoadsInPages(t *testing.T) {
	h := newHarness(t)
	cfg := h.config()
	cfg.PageSize = 7
	s := h.start(cfg)
	const n = 50
	for i := range n {
		a := grain.Address{Type: "Ticker", Owner: "acme", Alias: "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		if err := s.Register(h.ctx, a, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s2 := h.start(cfg)
	if err := s2.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h.loaded(s2)
	if st := s2.Stats(); st.Reminders != n+1 || st.Scheduled != n+1 {
		t.Fatalf("Stats = %+v, want %d", st, n+1)
	}
	h.clk.Advance(time.Minute)
	var seen uint64
	h.fired(s2, n+1, &seen)
}

// The first tick comes after the due time given, at once for a due time of
// now, then every period; etcd is written once, at Register.
func TestDueTime(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config())
	h.loaded(s)
	now := h.clk.Now()
	rev := func() int64 {
		resp, err := h.cli.Get(h.ctx, "/test/reminders/", prefixOpt("/test/reminders/")...)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "now", Period: time.Minute, MessageType: "now", Due: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "soon", Period: time.Minute, MessageType: "soon", Due: now.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	written := rev()
	var seen uint64
	if msgs := h.fired(s, 1, &seen); msgs[0].MessageType != "now" {
		t.Fatalf("fired %q at once, want now", msgs[0].MessageType)
	}
	h.clk.Advance(10*time.Second - time.Millisecond)
	h.fired(s, 1, &seen)
	h.clk.Advance(time.Millisecond)
	if msgs := h.fired(s, 2, &seen); msgs[0].MessageType != "soon" {
		t.Fatalf("fired %q after 10s, want soon", msgs[0].MessageType)
	}
	h.clk.Advance(50 * time.Second) // now + 1m: "now" again
	if msgs := h.fired(s, 3, &seen); msgs[0].MessageType != "now" {
		t.Fatalf("fired %q after 1m, want now", msgs[0].MessageType)
	}
	h.clk.Advance(10 * time.Second) // now + 1m10s: "soon" again
	if msgs := h.fired(s, 4, &seen); msgs[0].MessageType != "soon" {
		t.Fatalf("fired %q after 1m10s, want soon", msgs[0].MessageType)
	}
	if got := rev(); got != written {
		t.Fatalf("etcd revision %d after ticks, want %d: ticks wrote to etcd", got, written)
	}
	// A Due long past (more than a period) is not a first tick: no catch-up
	// on Register, the schedule goes on from it.
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "old", Period: time.Minute, MessageType: "old", Due: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	h.fired(s, 4, &seen)
	h.clk.Advance(50 * time.Second) // now + 2m: now and old
	h.fired(s, 6, &seen)
}

// A reminder due at once, registered by a silo that does not own the agent,
// fires at once on the silo that owns it, which learns of it by the watch.
func TestDueNowOnTheOwner(t *testing.T) {
	h := newHarness(t)
	cfgA, cfgB := h.config(), h.config()
	cfgA.View = newTestView(func(int) bool { return false }).get
	cfgB.View = newTestView(func(int) bool { return true }).get
	a, b := h.start(cfgA), h.start(cfgB)
	h.loaded(a)
	h.loaded(b)
	if err := a.Register(h.ctx, agent, grain.Reminder{Name: "now", Period: time.Minute, Due: h.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to see A's reminder", func() bool { return b.Stats().Scheduled == 1 })
	var seenA, seenB uint64
	h.fired(b, 1, &seenB)
	h.fired(a, 0, &seenA)
	h.clk.Advance(time.Minute)
	h.fired(b, 2, &seenB)
}
