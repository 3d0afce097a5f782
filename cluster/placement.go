package cluster

import (
	"hash/maphash"
	"sync"
)

// Placement: every agent address has exactly one owning silo in a membership
// view, chosen by rendezvous (highest random weight) hashing. Each member gets
// a weight for the address, weight(member, address); the member with the
// highest weight owns it (ties, which need a 64-bit collision, go to the
// smaller name). When a member leaves, only the addresses it owned move, each
// to the member with its next highest weight; when a member joins, it takes
// only the addresses for which it now has the highest weight. Every silo
// computes the same owner from the same view, with no coordination.
//
// The hash is part of the cluster's wire contract: silos of different
// versions must agree on owners, so it never changes. It is FNV-1a 64 of
// member + "/" + address, passed through the splitmix64 finalizer (FNV-1a
// alone mixes the last bytes poorly, which skews rendezvous weights).
// placement_test.go pins it with a table of owners.

// Owner returns the member of members that owns addr (an agent address in its
// canonical form `Type:owner:alias`), or "" when members is empty. members
// may be in any order; duplicates are harmless.
func Owner(addr string, members []string) string {
	best := ""
	var bestW uint64
	for i, m := range members {
		w := weight(m, addr)
		if i == 0 || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}

// weight is the rendezvous weight of member for addr: splitmix64's finalizer
// applied to FNV-1a 64 of member + "/" + addr. It never changes.
func weight(member, addr string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(member); i++ {
		h ^= uint64(member[i])
		h *= prime64
	}
	h ^= '/'
	h *= prime64
	for i := 0; i < len(addr); i++ {
		h ^= uint64(addr[i])
		h *= prime64
	}
	// splitmix64 finalizer.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// ownerTable answers Owner for one view's owners at a cost that does not grow
// with their number: Owner hashes every member, so the table remembers the
// owner of each address it was asked about, in shards chosen by a hash of the
// address. A hit costs a hash of the address and a map lookup under a read
// lock; a miss computes Owner and stores it. A shard holds at most
// ownerShardCap addresses: a full shard is emptied and fills again with the
// addresses routed from then on. Routers make one per view, so no entry
// outlives the view its owner came from. Safe for concurrent use.
type ownerTable struct {
	owners []string
	seed   maphash.Seed
	shards []ownerShard
}

type ownerShard struct {
	mu sync.RWMutex
	m  map[string]string
	_  [32]byte // a shard to a cache line: no false sharing between them
}

const (
	// ownerShards is the number of shards of an ownerTable: enough that
	// the silo's goroutines rarely meet on one.
	ownerShards = 64
	// ownerShardCap bounds the addresses a shard holds: 1,024, so a table
	// holds at most 65,536 (a few MiB at most).
	ownerShardCap = 1024
)

func newOwnerTable(owners []string) *ownerTable {
	t := &ownerTable{owners: owners, seed: maphash.MakeSeed()}
	if len(owners) > 1 {
		t.shards = make([]ownerShard, ownerShards)
	}
	return t
}

// owner returns Owner(addr, t.owners).
func (t *ownerTable) owner(addr string) string {
	switch len(t.owners) {
	case 0:
		return ""
	case 1:
		return t.owners[0]
	}
	s := &t.shards[maphash.String(t.seed, addr)%ownerShards]
	s.mu.RLock()
	o, ok := s.m[addr]
	s.mu.RUnlock()
	if ok {
		return o
	}
	o = Owner(addr, t.owners)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= ownerShardCap {
		s.m = make(map[string]string, 64)
	}
	s.m[addr] = o
	s.mu.Unlock()
	return o
}
