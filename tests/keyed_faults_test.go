package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestEtcdLeaderKilledKeyed: keyed increments (an idempotency key each,
// every failed attempt asked again with its key until it is answered) on
// the demo Counter, whose count is in the etcd state store, while the
// leader of a three-member etcd is killed three times and then a silo is
// killed (kill -9). Every key is applied exactly once: each OK reply is
// the count of keys answered so far, and each counter ends holding exactly
// that count. The leader kills alone fail no attempt: a save that meets
// the election is made again on the new leader within the Ask's deadline.
// That deadline is generous (30 s): an election on a loaded machine, with
// the etcd client moving to a live member, can take more than 5 s, and
// the property is that the runtime keeps trying while the caller waits,
// not how fast a loaded etcd elects.
func TestEtcdLeaderKilledKeyed(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints()})
	const workers = 6
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	counters := make([]*testcluster.KeyedCounter, workers)
	for w := range counters {
		k := testcluster.NewKeyedCounter(fmt.Sprintf("Counter:%s:keyed-%d", testcluster.Principal, w), fmt.Sprintf("keyed-%d", w))
		counters[w] = k
		var order []int
		for j := range c.Len() {
			order = append(order, (w+j)%c.Len())
		}
		cl := c.Client(t, order...)
		wg.Go(func() { k.Run(ctx, cl, 30*time.Second) })
	}
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	answered := func() int64 {
		var n int64
		for _, k := range counters {
			n += k.Keys()
		}
		return n
	}
	waitKeys := func(n int64) {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("%d keyed increments answered", n), func() bool { return answered() >= n })
	}
	failures := func() int {
		n := 0
		for _, k := range counters {
			n += k.Failures()
		}
		return n
	}
	waitKeys(200)
	for round := range 3 {
		leader := e.Leader()
		t.Logf("round %d: kill -9 the etcd leader (member %d) at %d keys", round+1, leader, answered())
		e.Kill(leader)
		e.Leader()
		waitKeys(answered() + 200)
		e.Restart(leader)
		waitKeys(answered() + 100)
	}
	if n := failures(); n > 0 {
		for _, k := range counters {
			for _, err := range k.Result().Failed {
				t.Errorf("%v", err)
			}
		}
		t.Errorf("%d keyed Asks failed under etcd leader kills alone, want none", n)
	}
	victim := 1
	t.Logf("kill -9 %s at %d keys", c.Silo(victim).Name, answered())
	c.Kill(victim)
	c.WaitGone(c.Silo(victim).Name)
	waitKeys(answered() + 200)
	c.Restart(victim)
	c.WaitMembers(c.Len())
	waitKeys(answered() + 200)
	stop()
	wg.Wait()

	cl := c.Client(t)
	var keys, doubles, lost int64
	for _, k := range counters {
		k.Check(t, cl)
		r := k.Result()
		keys += r.Keys
		doubles += r.Doubles
		lost += r.Lost
		for _, l := range r.Report {
			t.Errorf("%s", l)
		}
	}
	t.Logf("%d keyed increments answered, %d attempts failed (asked again), %d applied twice, %d lost", keys, failures(), doubles, lost)
	if doubles != 0 || lost != 0 {
		t.Errorf("%d increments applied twice and %d lost, want 0 and 0", doubles, lost)
	}
	c.CheckJournal()
}
