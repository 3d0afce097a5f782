package reminders

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
)

// fakeCluster places buckets over members as a cluster does: a bucket's
// owner is the member with the highest weight for it. Each change is a new
// view version.
type fakeCluster struct {
	mu      sync.Mutex
	version int64
	members []string
}

func (c *fakeCluster) set(members ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	c.members = members
}

func weight(member string, b int) uint32 {
	h := uint32(2166136261)
	for _, c := range []byte(member + "/" + BucketName(b)) {
		h = (h ^ uint32(c)) * 16777619
	}
	h ^= h >> 15
	h *= 0x2c1b3c6d
	h ^= h >> 12
	return h
}

func ownerOf(b int, members []string) string {
	best, bw := "", uint32(0)
	for _, m := range members {
		if w := weight(m, b); best == "" || w > bw {
			best, bw = m, w
		}
	}
	return best
}

// view is member me's Config.View.
func (c *fakeCluster) view(me string) func() View {
	return func() View {
		c.mu.Lock()
		members, version := c.members, c.version
		c.mu.Unlock()
		return View{Version: version, Owns: func(b int) bool { return ownerOf(b, members) == me }}
	}
}

func (c *fakeCluster) owned(me string, addrs []grain.Address) (buckets, reminders int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range Buckets {
		if ownerOf(b, c.members) == me {
			buckets++
		}
	}
	for _, a := range addrs {
		if ownerOf(Bucket(a), c.members) == me {
			reminders++
		}
	}
	return buckets, reminders
}

// countingKV counts the reminders read back from the buckets.
type countingKV struct {
	clientv3.KV
	root string
	read atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	if err == nil {
		for _, kv := range resp.Kvs {
			if strings.HasPrefix(string(kv.Key), k.root) {
				k.read.Add(1)
			}
		}
	}
	return resp, err
}

// Three silos share the reminders by bucket: each holds exactly the
// reminders of its buckets (no other), all fire once per period between
// them; when a silo leaves, its buckets move to the others (no reminder
// lost, none fired twice); a silo restarted reads back only its buckets.
func TestBucketsPartitioned(t *testing.T) {
	h := newHarness(t)
	c := &fakeCluster{}
	names := []string{"s0", "s1", "s2"}
	c.set(names...)
	svcs := make([]*Service, len(names))
	for i, n := range names {
		cfg := h.config()
		cfg.View = c.view(n)
		svcs[i] = h.start(cfg)
	}
	const n = 300
	addrs := make([]grain.Address, n)
	for i := range addrs {
		addrs[i] = grain.Address{Type: "Ticker", Owner: "acme", Alias: fmt.Sprintf("a%d", i)}
		// Registered through any silo: the bucket's owner fires it.
		if err := svcs[i%3].Register(h.ctx, addrs[i], grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, live []int) {
		t.Helper()
		total := 0
		for _, i := range live {
			s := svcs[i]
			h.settled(s)
			wantB, wantR := c.owned(names[i], addrs)
			if st := s.Stats(); st.Buckets != wantB || st.Reminders != wantR || st.Scheduled != wantR {
				t.Fatalf("%s: %s holds %+v, want %d buckets, %d reminders", when, names[i], st, wantB, wantR)
			}
			total += wantR
		}
		if total != n {
			t.Fatalf("%s: %d reminders held in all, want %d", when, total, n)
		}
	}
	for _, s := range svcs {
		h.loaded(s)
	}
	check("at start", []int{0, 1, 2})

	seen := make([]uint64, 3)
	fired := func(want ...uint64) {
		t.Helper()
		for i, w := range want {
			h.fired(svcs[i], w, &seen[i])
		}
	}
	h.clk.Advance(time.Minute)
	_, r0 := c.owned("s0", addrs)
	_, r1 := c.owned("s1", addrs)
	_, r2 := c.owned("s2", addrs)
	fired(uint64(r0), uint64(r1), uint64(r2))

	// s2 leaves gracefully (it fired the last tick): its buckets move to
	// s0 and s1, which fire them from the next tick on, once.
	c.set("s0", "s1")
	for _, s := range svcs {
		s.Rebalance(h.clk.Now())
	}
	check("after s2 left", []int{0, 1})
	if st := svcs[2].Stats(); st.Buckets != 0 || st.Reminders != 0 || st.Scheduled != 0 {
		t.Fatalf("s2 still holds %+v", st)
	}
	_, m0 := c.owned("s0", addrs)
	_, m1 := c.owned("s1", addrs)
	fired(uint64(r0), uint64(r1), uint64(r2)) // nothing more yet
	h.clk.Advance(time.Minute)
	fired(uint64(r0+m0), uint64(r1+m1), uint64(r2))

	// s1 restarts: it reads back its buckets' reminders only.
	svcs[1].Close()
	cli := h.etcd.Client(t)
	kv := &countingKV{KV: cli.KV, root: "/test/reminder-buckets/"}
	cli.KV = kv
	cfg := h.config()
	cfg.Client = cli
	cfg.View = c.view("s1")
	svcs[1] = h.start(cfg)
	h.loaded(svcs[1])
	check("after s1 restarted", []int{0, 1})
	if got := kv.read.Load(); got != int64(m1) {
		t.Fatalf("s1 read %d reminders back, want its %d", got, m1)
	}
}

// A view that moves a bucket away stops its ticks at once, before the
// Rebalance that lets it go (never fired where the view in force does not
// own it); a view that gives it back before then fires a tick that fell
// in between once.
func TestViewInForceDecides(t *testing.T) {
	h := newHarness(t)
	tv := newTestView(func(int) bool { return true })
	cfg := h.config()
	cfg.View = tv.get
	s := h.start(cfg)
	h.loaded(s)
	if err := s.Register(h.ctx, agent, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var seen uint64
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)
	mine := Bucket(agent)
	tv.set(func(b int) bool { return b != mine }) // not applied yet
	lostAt := h.clk.Now()
	h.clk.Advance(time.Minute)
	h.fired(s, 1, &seen)
	tv.set(func(int) bool { return true })
	s.Rebalance(lostAt)
	h.settled(s)
	h.fired(s, 2, &seen) // the tick that fell while it was away, once
	h.clk.Advance(time.Minute)
	h.fired(s, 3, &seen)
}

// Reminders stored by an earlier version (the legacy layout) move to their
// buckets at start, before loading: they fire, a tick missed while the silo
// was down fires once, List and Unregister find them; a legacy reminder
// written later (a silo of the earlier version, in a rolling upgrade) moves
// at once.
func TestMigratesLegacyLayout(t *testing.T) {
	h := newHarness(t)
	due := h.clk.Now().Add(-90 * time.Second).UnixMilli() // a tick 30 s ago
	for _, a := range []string{"t1", "t2", "t3"} {
		if _, err := h.cli.Put(h.ctx, "/test/reminders/Ticker:acme:"+a+"/tick", fmt.Sprintf(`{"period_ms":60000,"due_unix_ms":%d}`, due)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.cli.Put(h.ctx, "/test/reminders/not-an-address/x", `{}`); err != nil {
		t.Fatal(err)
	}
	s := h.start(h.config())
	h.loaded(s)
	if st := s.Stats(); st.Migrated != 3 || st.Reminders != 3 {
		t.Fatalf("Stats = %+v, want 3 migrated and held", st)
	}
	var seen uint64
	h.fired(s, 3, &seen) // the ticks missed while down, once
	h.clk.Advance(30 * time.Second)
	h.fired(s, 6, &seen)
	resp, err := h.cli.Get(h.ctx, "/test/reminders/", prefixOpt("/test/reminders/")...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("legacy keys left: %v, %v; want the unreadable one", resp, err)
	}
	t1 := grain.Address{Type: "Ticker", Owner: "acme", Alias: "t1"}
	if list, err := s.List(h.ctx, t1); err != nil || len(list) != 1 || list[0].Name != "tick" {
		t.Fatalf("List = %v, %v", list, err)
	}
	if err := s.Unregister(h.ctx, t1, "tick"); err != nil {
		t.Fatal(err)
	}
	// A silo of the earlier version writes one now.
	if _, err := h.cli.Put(h.ctx, "/test/reminders/Ticker:acme:t4/tick", fmt.Sprintf(`{"period_ms":60000,"due_unix_ms":%d}`, due)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late legacy reminder to move", func() bool { st := s.Stats(); return st.Migrated == 4 && st.Reminders == 3 })
	h.clk.Advance(time.Minute)
	h.fired(s, 9, &seen) // t2, t3, t4
}
