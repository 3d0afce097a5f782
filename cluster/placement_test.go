package cluster

import (
	"fmt"
	"testing"

	"github.com/agentsilo/agentsilo/internal/membership"
	"go.uber.org/goleak"
)

// The placement contract: silos of every version must pick the same owner
// for an address. If this test fails, the hash changed: change it back.
func TestPlacementContract(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	members := []string{"silo-a", "silo-b", "silo-c", "silo-d", "silo-e"}
	// Weight is FNV-1a 64 of member+"/"+address with the splitmix64 finalizer.
	if w := weight("silo-a", "Echo:system:a"); w != 0x21bbf9a766611a91 {
		t.Fatalf("weight(silo-a, Echo:system:a) = %#x, want 0x21bbf9a766611a91", w)
	}
	if w := weight("", ""); w != 0x7face396ae054c7d {
		t.Fatalf(`weight("", "") = %#x, want 0x7face396ae054c7d`, w)
	}
	for _, c := range []struct{ addr, owner string }{
		{"Echo:system:a", "silo-b"},
		{"Echo:system:b", "silo-a"},
		{"Echo:system:c", "silo-c"},
		{"Echo:alice:main", "silo-e"},
		{"Echo:bob:main", "silo-a"},
		{"Chat:alice:1", "silo-d"},
		{"Chat:alice:2", "silo-d"},
		{"Chat:alice:3", "silo-c"},
		{"Chat:bob:support", "silo-b"},
		{"Pipeline:acme:p", "silo-e"},
		{"Pipeline:acme:q", "silo-e"},
		{"Session:dev:0001", "silo-a"},
		{"Session:dev:0002", "silo-e"},
		{"Ticker:system:t1", "silo-b"},
		{"Ticker:system:t2", "silo-a"},
		{"Planner:carol:x", "silo-c"},
		{"Planner:carol:y", "silo-a"},
		{"Worker:system:w-17", "silo-b"},
		{"Worker:system:w-18", "silo-b"},
		{"Router:system:root", "silo-b"},
	} {
		if got := Owner(c.addr, members); got != c.owner {
			t.Errorf("Owner(%q) = %q, want %q", c.addr, got, c.owner)
		}
		// The order of the member list does not matter.
		rev := []string{"silo-e", "silo-d", "silo-c", "silo-b", "silo-a", "silo-c"}
		if got := Owner(c.addr, rev); got != c.owner {
			t.Errorf("Owner(%q) with the members reversed = %q, want %q", c.addr, got, c.owner)
		}
	}
	if got := Owner("Echo:system:a", nil); got != "" {
		t.Errorf("Owner with no members = %q, want empty", got)
	}
	if got := Owner("Echo:system:a", []string{"only"}); got != "only" {
		t.Errorf("Owner with one member = %q, want only", got)
	}
	v := membership.View{Members: []membership.Member{{Name: "silo-a"}, {Name: "silo-b"}, {Name: "silo-c"}, {Name: "silo-d"}, {Name: "silo-e"}}}
	if got := Owner("Chat:alice:1", v.Owners()); got != "silo-d" {
		t.Errorf("membership.View.Owner = %q, want silo-d", got)
	}
}

// Removing a member moves exactly its addresses; adding one takes addresses
// only to the newcomer; load spreads evenly.
func TestPlacementRendezvous(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	const n = 30000
	three := []string{"silo-a", "silo-b", "silo-c"}
	two := []string{"silo-a", "silo-c"}
	four := []string{"silo-a", "silo-b", "silo-c", "silo-d"}
	count := map[string]int{}
	for i := range n {
		addr := fmt.Sprintf("Echo:owner%d:agent-%d", i%97, i)
		o3 := Owner(addr, three)
		count[o3]++
		if o2 := Owner(addr, two); o3 != "silo-b" && o2 != o3 {
			t.Fatalf("%s moved from %s to %s when silo-b left", addr, o3, o2)
		} else if o2 == "silo-b" {
			t.Fatalf("%s owned by a removed member", addr)
		}
		if o4 := Owner(addr, four); o4 != o3 && o4 != "silo-d" {
			t.Fatalf("%s moved from %s to %s when silo-d joined", addr, o3, o4)
		}
	}
	for _, m := range three {
		if share := float64(count[m]) / n; share < 0.25 || share > 0.42 {
			t.Errorf("%s owns %.1f%% of the addresses, want 25-42%%", m, 100*share)
		}
	}
}
