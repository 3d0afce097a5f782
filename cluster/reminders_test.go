package cluster

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

// TestRemindersHeldByBucketOwner: with in-process silos on real etcd, each
// silo holds exactly the reminder buckets it owns in its view and the
// reminders in them, none other; when a silo leaves, the others take its
// buckets (every reminder held once in all), and when it comes back it
// holds only its own again. Both moves are hand-overs: the silo that held
// a bucket sends it to the silo taking it over, which reads none of it from
// etcd.
func TestRemindersHeldByBucketOwner(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	names := []string{"s1", "s2", "s3"}
	for _, n := range names {
		c.start(n)
	}
	c.waitView(names...)
	const n = 90
	addrs := make([]grain.Address, n)
	for i := range addrs {
		addrs[i] = grain.Address{Type: "Probe", Owner: "test", Alias: fmt.Sprintf("r%d", i)}
		c.mu.Lock()
		s := c.silos[names[i%3]]
		c.mu.Unlock()
		if err := s.reminders.Register(t.Context(), addrs[i], grain.Reminder{Name: "tick", Period: time.Hour, Due: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	held := func(when string, owners ...string) {
		t.Helper()
		want := make(map[string][2]int)
		for b := range reminders.Buckets {
			o := Owner(reminders.BucketName(b), owners)
			w := want[o]
			w[0]++
			want[o] = w
		}
		for _, a := range addrs {
			o := Owner(reminders.BucketName(reminders.Bucket(a)), owners)
			w := want[o]
			w[1]++
			want[o] = w
		}
		waitFor(t, when+": each silo holding its buckets", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, name := range owners {
				s := c.silos[name]
				st := s.reminders.Stats()
				if st.View != s.router.state.Load().view.Version || st.Loading != 0 || st.Buckets != want[name][0] || st.Reminders != want[name][1] {
					return false
				}
			}
			return true
		})
	}
	held("three silos", "s1", "s2", "s3")
	fetched := func(names ...string) (n uint64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, name := range names {
			n += c.silos[name].reminders.Stats().Fetched
		}
		return n
	}
	owned := func(name string, owners ...string) (n uint64) {
		for b := range reminders.Buckets {
			if Owner(reminders.BucketName(b), owners) == name {
				n++
			}
		}
		return n
	}
	before := fetched("s1", "s2")
	c.stop("s3")
	c.waitView("s1", "s2")
	held("s3 left", "s1", "s2")
	// s3 left gracefully: it handed its buckets to s1 and s2, which read
	// none of them from etcd.
	if got, want := fetched("s1", "s2")-before, owned("s3", names...); got != want {
		t.Fatalf("s1 and s2 fetched %d buckets from s3 as it left, want all its %d", got, want)
	}
	c.start("s3")
	c.waitView(names...)
	held("s3 back", "s1", "s2", "s3")
	// s3 joined: s1 and s2 handed it its buckets.
	if got, want := fetched("s3"), owned("s3", names...); got != want {
		t.Fatalf("s3 fetched %d buckets from s1 and s2 as it joined, want all its %d", got, want)
	}
}
