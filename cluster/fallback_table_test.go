package cluster

import (
	"fmt"
	"testing"

	"github.com/agentsilo/agentsilo/internal/membership"
)

// fallbackIn (by the view's owner table) answers as fallbackOf (hashing
// every member) for sessions named after members, after departed silos and
// after none.
func TestFallbackInMatchesFallbackOf(t *testing.T) {
	for _, n := range []int{1, 2, 5, 16} {
		var v membership.View
		for i := range n {
			v.Members = append(v.Members, membership.Member{Name: fmt.Sprintf("s%02d", i)})
		}
		st := &routeState{view: v, owners: v.Owners()}
		st.table = newOwnerTable(st.owners)
		for i := range 2000 {
			addr := fmt.Sprintf("Session:p:%d@s%02d", i, i%(n+2))
			if i%7 == 0 {
				addr = fmt.Sprintf("Session:p:%d", i)
			}
			if got, want := fallbackIn(addr, st), fallbackOf(addr, v); got != want {
				t.Fatalf("%d members: fallbackIn(%q) = %q, fallbackOf = %q", n, addr, got, want)
			}
		}
	}
}
