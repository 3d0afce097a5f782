package membership

import (
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one silo's record in the membership view.
type Member struct {
	Name        string    `json:"name"`
	PeerAddr    string    `json:"peer_addr"`
	GatewayAddr string    `json:"gateway_addr"`
	GossipAddr  string    `json:"gossip_addr"`
	StartTime   time.Time `json:"start_time"`
	// LeaseID is the etcd lease the record is bound to; survivors revoke it
	// when gossip declares the silo dead.
	LeaseID int64 `json:"lease_id"`
	// FenceAfter is the silo's fencing bound (see Membership).
	FenceAfter time.Duration `json:"fence_after_ns"`
	// Leaving is set by Leave just before the record is removed: the silo
	// has stopped serving and its addresses may be taken over at once.
	Leaving bool `json:"leaving,omitempty"`
	// Unreachable is set by the silo itself once a majority of the other
	// members reported that they cannot reach its peer port (see
	// unreachable.go): from the view that shows it, the silo owns no
	// addresses (View.Owners leaves it out), for the rest of its run.
	Unreachable bool `json:"unreachable,omitempty"`
	// Drained is set by an Unreachable silo once it has deactivated every
	// activation it held and can start none: the new owners of its
	// addresses take them over without asking it (it cannot be asked).
	Drained bool `json:"drained,omitempty"`
	// Security is the fingerprint of the silo's security settings (see
	// Security); not Known in the record of a silo of an older version.
	Security Security `json:"security,omitzero"`
}

// View is a membership view: the members in etcd at revision Version.
type View struct {
	Version int64
	// Members sorted by Name. Shared between copies of the view: do not
	// modify.
	Members []Member
}

// Names returns the members' names, sorted.
func (v View) Names() []string {
	names := make([]string, len(v.Members))
	for i, m := range v.Members {
		names[i] = m.Name
	}
	return names
}

// Member returns the record of the member named name.
func (v View) Member(name string) (Member, bool) {
	i := sort.Search(len(v.Members), func(i int) bool { return v.Members[i].Name >= name })
	if i < len(v.Members) && v.Members[i].Name == name {
		return v.Members[i], true
	}
	return Member{}, false
}

// Owners returns the names, sorted, of the members that own addresses: those
// not leaving and not unreachable.
func (v View) Owners() []string {
	names := make([]string, 0, len(v.Members))
	for _, m := range v.Members {
		if !m.Leaving && !m.Unreachable {
			names = append(names, m.Name)
		}
	}
	return names
}

// Departure is a member removed from the view without leaving gracefully,
// whose addresses may not be taken over before At (see TakeoverAt).
type Departure struct {
	Name     string
	PeerAddr string
	// Lease is the lease of the departed member's record.
	Lease clientv3.LeaseID
	At    time.Time
}
