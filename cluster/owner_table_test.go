package cluster

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func memberNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("silo-%03d", i)
	}
	return names
}

// An owner table answers what Owner answers, for addresses asked once and
// again, more addresses than it holds (so that full shards are emptied), and
// from several goroutines at once.
func TestOwnerTableAgreesWithOwner(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	if got := newOwnerTable(nil).owner("Echo:system:a"); got != "" {
		t.Fatalf("no members: owner %q", got)
	}
	if got := newOwnerTable([]string{"only"}).owner("Echo:system:a"); got != "only" {
		t.Fatalf("one member: owner %q", got)
	}
	for _, n := range []int{2, 5, 20} {
		members := memberNames(n)
		tab := newOwnerTable(members)
		const addrs = ownerShards * ownerShardCap * 2
		var wg sync.WaitGroup
		errc := make(chan string, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for pass := range 2 {
					for i := range addrs / 4 {
						a := fmt.Sprintf("Echo:owner%d:agent-%d", i%13, (i*4+g*7919)%addrs)
						if got, want := tab.owner(a), Owner(a, members); got != want {
							errc <- fmt.Sprintf("%d members, pass %d: owner of %s is %s in the table, %s by Owner", n, pass, a, got, want)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for e := range errc {
			t.Error(e)
		}
	}
}

// A router routes by the table of the view it installed: a silo that joins
// takes only the addresses it now owns (about 1/N of them), as Owner says.
func TestRouteFollowsViewTables(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	before := &routeState{owners: memberNames(4)}
	before.table = newOwnerTable(before.owners)
	after := &routeState{owners: append(memberNames(4), "silo-new")}
	after.table = newOwnerTable(after.owners)
	const n = 20000
	moved := 0
	for i := range n {
		a := fmt.Sprintf("Echo:owner%d:agent-%d", i%97, i)
		o4, o5 := before.table.owner(a), after.table.owner(a)
		if o4 != o5 {
			if o5 != "silo-new" {
				t.Fatalf("%s moved from %s to %s, not to the silo that joined", a, o4, o5)
			}
			moved++
		}
		if o5 != Owner(a, after.owners) {
			t.Fatalf("%s: table says %s, Owner %s", a, o5, Owner(a, after.owners))
		}
	}
	if frac := float64(moved) / n; frac < 0.17 || frac > 0.23 {
		t.Fatalf("a join moved %.3f of the addresses, want about 1/5", frac)
	}
}

// BenchmarkRoute is the cost of finding an address's owner at 4, 16 and 100
// members: by the router's per-view table (table), and by hashing every
// member (hash, Owner). The addresses are 10,000 busy agents, each routed
// again and again, as a silo's traffic does.
func BenchmarkRoute(b *testing.B) {
	addrs := make([]string, 10000)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("Chat:owner%d:agent-%d", i%97, i)
	}
	for _, n := range []int{4, 16, 100} {
		members := memberNames(n)
		tab := newOwnerTable(members)
		b.Run(fmt.Sprintf("table/members=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				tab.owner(addrs[i%len(addrs)])
				i++
			}
		})
		b.Run(fmt.Sprintf("hash/members=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				Owner(addrs[i%len(addrs)], members)
				i++
			}
		})
	}
}
