package grain

import "sync"

// directory maps canonical addresses to live activations, in shards so that
// concurrent senders to different agents rarely share a lock.
type directory struct {
	shards [64]dirShard
}

type dirShard struct {
	mu sync.RWMutex
	m  map[string]*activation
	_  [24]byte // keep shards on separate cache lines
}

func (d *directory) init() {
	for i := range d.shards {
		d.shards[i].m = make(map[string]*activation)
	}
}

func (d *directory) shard(key string) *dirShard {
	// FNV-1a; only spreads keys over shards, so it need not be strong.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &d.shards[h%uint32(len(d.shards))]
}

// get returns the live activation of key, or nil.
func (d *directory) get(key string) *activation {
	sh := d.shard(key)
	sh.mu.RLock()
	a := sh.m[key]
	sh.mu.RUnlock()
	return a
}

// each calls f for every activation; f must not touch the directory.
func (d *directory) each(f func(*activation)) {
	var batch []*activation
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.RLock()
		batch = batch[:0]
		for _, a := range sh.m {
			batch = append(batch, a)
		}
		sh.mu.RUnlock()
		for _, a := range batch {
			f(a)
		}
	}
}
