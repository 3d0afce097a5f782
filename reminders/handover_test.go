package reminders

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// handOverCluster is a fakeCluster whose members hand buckets over: a
// member's Fetch asks the owner of the bucket in the view before the last
// one, as a silo asks the silo that owned it before.
type handOverCluster struct {
	fakeCluster
	prev  []string
	svcs  sync.Map    // member -> *Service
	after func(b int) // called after an Export that a Fetch returns, before the taker applies it
}

func (c *handOverCluster) set(members ...string) {
	c.mu.Lock()
	c.prev = c.members
	c.mu.Unlock()
	c.fakeCluster.set(members...)
}

func (c *handOverCluster) fetch(me string) func(context.Context, int) ([]byte, error) {
	return func(_ context.Context, b int) ([]byte, error) {
		c.mu.Lock()
		from := ownerOf(b, c.prev)
		c.mu.Unlock()
		svc, ok := c.svcs.Load(from)
		if from == "" || from == me || !ok {
			return nil, errs.New(codes.NotFound, "no silo held bucket %d", b)
		}
		data, err := svc.(*Service).Export(b)
		if err == nil && c.after != nil {
			c.after(b)
		}
		return data, err
	}
}

// A silo leaving gracefully hands its buckets to the silos taking them
// over: they read nothing from etcd, hold exactly their buckets' reminders,
// including a reminder written and one deleted after the hand-over was
// encoded (the watch brings them), and every reminder fires once a period
// between them. The leaving silo is handed over once its buckets were
// fetched.
func TestHandOverOnLeave(t *testing.T) {
	h := newHarness(t)
	c := &handOverCluster{}
	names := []string{"s0", "s1", "s2"}
	c.set(names...)
	svcs := make([]*Service, len(names))
	reads := make([]*countingKV, len(names))
	for i, n := range names {
		cli := h.etcd.Client(t)
		reads[i] = &countingKV{KV: cli.KV, root: "/test/reminder-buckets/"}
		cli.KV = reads[i]
		cfg := h.config()
		cfg.Client = cli
		cfg.View = c.view(n)
		cfg.Fetch = c.fetch(n)
		svcs[i] = h.start(cfg)
		c.svcs.Store(n, svcs[i])
	}
	const n = 300
	addrs := make([]grain.Address, n)
	for i := range addrs {
		addrs[i] = grain.Address{Type: "Ticker", Owner: "acme", Alias: fmt.Sprintf("a%d", i)}
		if err := svcs[i%3].Register(h.ctx, addrs[i], grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range svcs {
		h.loaded(s)
	}
	var seen [3]uint64
	h.clk.Advance(time.Minute)
	_, r0 := c.owned("s0", addrs)
	_, r1 := c.owned("s1", addrs)
	_, r2 := c.owned("s2", addrs)
	h.fired(svcs[0], uint64(r0), &seen[0])
	h.fired(svcs[1], uint64(r1), &seen[1])
	h.fired(svcs[2], uint64(r2), &seen[2])

	// After the first bucket s2 hands over is encoded, a reminder is added
	// to it and one of its reminders removed, in etcd: only the taker's
	// watch can bring them.
	var moved []grain.Address
	for _, a := range addrs {
		if ownerOf(Bucket(a), []string{"s0", "s1", "s2"}) == "s2" {
			moved = append(moved, a)
		}
	}
	var mu sync.Mutex
	var added, removed grain.Address
	var changed atomic.Bool
	c.after = func(b int) {
		mu.Lock()
		defer mu.Unlock()
		i := slices.IndexFunc(moved, func(a grain.Address) bool { return Bucket(a) == b })
		if i < 0 || changed.Load() {
			return
		}
		func() {
			removed = moved[i]
			for j := 0; ; j++ {
				added = grain.Address{Type: "Ticker", Owner: "acme", Alias: fmt.Sprintf("new%d", j)}
				if Bucket(added) == b {
					break
				}
			}
			val, err := encode(grain.Reminder{Period: time.Minute, Due: h.clk.Now().Add(time.Minute)})
			if err != nil {
				t.Error(err)
			}
			if _, err := h.cli.Put(h.ctx, svcs[0].keys.of(added, "tick"), string(val)); err != nil {
				t.Error(err)
			}
			if _, err := h.cli.Delete(h.ctx, svcs[0].keys.of(removed, "tick")); err != nil {
				t.Error(err)
			}
			changed.Store(true)
		}()
	}
	for _, r := range reads {
		r.read.Store(0)
	}
	c.set("s0", "s1")
	for _, s := range svcs {
		s.Rebalance(h.clk.Now())
	}
	h.settled(svcs[0])
	h.settled(svcs[1])
	if !changed.Load() {
		t.Fatal("no bucket was handed over")
	}
	if err := svcs[2].HandedOver(h.ctx); err != nil {
		t.Fatal(err)
	}
	gained := 0
	for b := range Buckets {
		if ownerOf(b, []string{"s0", "s1", "s2"}) == "s2" {
			gained++
		}
	}
	f0, f1 := svcs[0].Stats().Fetched, svcs[1].Stats().Fetched
	if f0+f1 != uint64(gained) {
		t.Fatalf("buckets fetched: %d + %d, want all %d of s2's", f0, f1, gained)
	}
	for i := range 2 {
		if got := reads[i].read.Load(); got != 0 {
			t.Fatalf("%s read %d reminders from etcd taking s2's buckets over, want 0", names[i], got)
		}
	}
	now := append(slices.DeleteFunc(slices.Clone(addrs), func(a grain.Address) bool { return a == removed }), added)
	has := func(s *Service, a grain.Address) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		bk := s.buckets[Bucket(a)]
		return bk != nil && bk.entries[s.keys.of(a, "tick")] != nil
	}
	owner := svcs[0]
	if ownerOf(Bucket(added), c.members) == "s1" {
		owner = svcs[1]
	}
	waitFor(t, "the watch to bring what changed after the hand-over", func() bool {
		_, w0 := c.owned("s0", now)
		_, w1 := c.owned("s1", now)
		return svcs[0].Stats().Reminders == w0 && svcs[1].Stats().Reminders == w1 && has(owner, added) && !has(owner, removed)
	})
	_, w0 := c.owned("s0", now)
	_, w1 := c.owned("s1", now)
	h.clk.Advance(time.Minute)
	h.fired(svcs[0], uint64(r0+w0), &seen[0])
	h.fired(svcs[1], uint64(r1+w1), &seen[1])
	h.fired(svcs[2], uint64(r2), &seen[2]) // nothing more
}

// A hand-over that fails (the old owner gone, an answer that does not
// decode) is read from etcd instead: nothing is lost.
func TestHandOverFallsBackToEtcd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fetch func(context.Context, int) ([]byte, error)
	}{
		{"unavailable", func(context.Context, int) ([]byte, error) { return nil, errs.New(codes.Unavailable, "gone") }},
		{"unreadable", func(context.Context, int) ([]byte, error) { return []byte{handOverFormat, 0xff}, nil }},
		{"wrong bucket", func(_ context.Context, b int) ([]byte, error) {
			return []byte{handOverFormat, byte((b + 1) % 100), 1, 0}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.start(h.config())
			for i := range 50 {
				addr := grain.Address{Type: "Ticker", Owner: "acme", Alias: fmt.Sprintf("a%d", i)}
				if err := a.Register(h.ctx, addr, grain.Reminder{Name: "tick", Period: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := h.config()
			cfg.Fetch = tc.fetch
			cfg.Logger = slog.New(slog.DiscardHandler)
			b := h.start(cfg)
			h.loaded(b)
			if st := b.Stats(); st.Reminders != 50 || st.Fetched != 0 {
				t.Fatalf("Stats = %+v, want 50 reminders read from etcd", st)
			}
		})
	}
}

// Export's encoding decodes to what was held; Export answers NotFound for a
// bucket not held and not let go of, and InvalidArgument out of range; a
// bucket let go of is exported once.
func TestExport(t *testing.T) {
	h := newHarness(t)
	tv := newTestView(func(int) bool { return true })
	cfg := h.config()
	cfg.View = tv.get
	cfg.Fetch = func(context.Context, int) ([]byte, error) { return nil, errs.New(codes.NotFound, "none") }
	s := h.start(cfg)
	h.loaded(s)
	a := grain.Address{Type: "Ticker", Owner: "acme", Alias: "x"}
	want := grain.Reminder{Name: "tick", Period: 90 * time.Second, MessageType: "wake", Message: "héllo\x00", Due: time.UnixMilli(1_700_000_123_456)}
	if err := s.Register(h.ctx, a, want); err != nil {
		t.Fatal(err)
	}
	b := Bucket(a)
	data, err := s.Export(b)
	if err != nil {
		t.Fatal(err)
	}
	list, seen, err := s.decodeHandOver(b, data)
	if err != nil || len(list) != 1 || seen <= 0 {
		t.Fatalf("decoded %v at %d, %v", list, seen, err)
	}
	if got := list[0]; got.key != s.keys.of(a, "tick") || got.addr != a || !got.r.Due.Equal(want.Due) || got.r.Name != want.Name ||
		got.r.Period != want.Period || got.r.MessageType != want.MessageType || got.r.Message != want.Message || got.rev <= 0 {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if _, err := s.Export(Buckets); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("Export(out of range) = %v, want InvalidArgument", err)
	}
	// Another bucket, not exported while held, is kept once let go of,
	// for one Export; the one exported already is not kept.
	var other grain.Address
	for i := 0; ; i++ {
		if other = (grain.Address{Type: "Ticker", Owner: "acme", Alias: fmt.Sprint(i)}); Bucket(other) != b {
			break
		}
	}
	if err := s.Register(h.ctx, other, want); err != nil {
		t.Fatal(err)
	}
	c := Bucket(other)
	tv.set(func(n int) bool { return n != b && n != c })
	s.Rebalance(h.clk.Now())
	h.settled(s)
	if got, err := s.Export(c); err != nil {
		t.Fatalf("Export of a bucket let go of: %v", err)
	} else if list, _, err := s.decodeHandOver(c, got); err != nil || len(list) != 1 || list[0].addr != other {
		t.Fatalf("Export of a bucket let go of decodes to %+v, %v", list, err)
	}
	for _, n := range []int{b, c} {
		if _, err := s.Export(n); errs.Code(err) != codes.NotFound {
			t.Fatalf("Export of bucket %d (let go of, exported once) = %v, want NotFound", n, err)
		}
	}
	done, cancel := context.WithCancel(h.ctx)
	cancel()
	if err := s.HandedOver(done); err != context.Canceled {
		t.Fatalf("HandedOver while the Service holds buckets = %v, want it waiting", err)
	}
}

// FuzzDecodeHandOver: no input crashes the decoder or makes it allocate
// beyond its bytes; what it accepts encodes back to the same reminders.
func FuzzDecodeHandOver(f *testing.F) {
	s := &Service{keys: newKeys("/test/")}
	a := grain.Address{Type: "Ticker", Owner: "acme", Alias: "x"}
	b := Bucket(a)
	bk := &bucket{n: b, entries: map[string]*entry{}, loaded: true, seen: 7}
	bk.entries[s.keys.of(a, "tick")] = &entry{r: grain.Reminder{Name: "tick", Period: time.Minute, Message: "m", Due: time.UnixMilli(5)}, rev: 3}
	s.buckets[b] = bk
	seed, err := s.Export(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{handOverFormat})
	f.Add([]byte{handOverFormat, byte(b), 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		list, seen, err := s.decodeHandOver(b, data)
		if err != nil {
			return
		}
		if seen < 0 {
			t.Fatalf("seen %d", seen)
		}
		for _, l := range list {
			if kb, _, _, err := s.keys.parse(l.key); err != nil || kb != b || l.r.Period <= 0 {
				t.Fatalf("accepted %+v", l)
			}
		}
	})
}
