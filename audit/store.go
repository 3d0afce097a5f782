package audit

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"
)

// Store keeps the records, their chains' heads and their keys. Methods are
// safe for concurrent use.
type Store interface {
	// Append writes recs after partition's head, in order, each unless
	// a record of its key is in the log already (in any partition), and
	// moves the head, all or nothing; concurrent appends to the partition
	// wait or retry, so the chain never forks. It sets the Seq, Prev and
	// Hash of each record it wrote and returns them.
	Append(ctx context.Context, partition string, recs []Record) ([]Record, error)
	// Heads returns every partition's head, by partition name.
	Heads(ctx context.Context) ([]Head, error)
	// Scan returns up to limit records of partition with a Seq above
	// after, in order.
	Scan(ctx context.Context, partition string, after uint64, limit int) ([]Record, error)
	// Sweep removes up to max of partition's first records older than
	// before (never one after a younger one), making the last it removed
	// the anchor; it returns how many it removed.
	Sweep(ctx context.Context, partition string, before time.Time, max int) (int, error)
	// Close releases what the store opened itself.
	Close() error
}

// Link sets the place (Partition, Seq) and the hashes (Prev, Hash) of
// recs, the records to append after head, in order. Stores call it.
func Link(head Head, recs []Record) {
	seq, prev := head.Seq, head.Hash
	for i := range recs {
		seq++
		recs[i].Partition = head.Partition
		recs[i].Seq = seq
		recs[i].Prev = prev
		recs[i].Hash = recs[i].Sum()
		prev = recs[i].Hash
	}
}

// Memory is a Store in memory, for tests of what sits above a store.
type Memory struct {
	mu    sync.Mutex
	heads map[string]Head
	recs  map[string][]Record
	keys  map[string]bool
}

// NewMemory returns an empty memory store.
func NewMemory() *Memory {
	return &Memory{heads: map[string]Head{}, recs: map[string][]Record{}, keys: map[string]bool{}}
}

// Append implements Store.
func (m *Memory) Append(ctx context.Context, partition string, recs []Record) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for _, r := range recs {
		if m.keys[r.Key] {
			continue
		}
		m.keys[r.Key] = true
		out = append(out, r)
	}
	h := m.heads[partition]
	h.Partition = partition
	Link(h, out)
	if len(out) > 0 {
		h.Seq, h.Hash = out[len(out)-1].Seq, out[len(out)-1].Hash
	}
	m.heads[partition] = h
	m.recs[partition] = append(m.recs[partition], out...)
	return out, nil
}

// Heads implements Store.
func (m *Memory) Heads(ctx context.Context) ([]Head, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Head
	for _, h := range m.heads {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out, nil
}

// Scan implements Store.
func (m *Memory) Scan(ctx context.Context, partition string, after uint64, limit int) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for _, r := range m.recs[partition] {
		if r.Seq > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// Sweep implements Store.
func (m *Memory) Sweep(ctx context.Context, partition string, before time.Time, max int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.recs[partition]
	n := 0
	for n < len(rs) && n < max && rs[n].Time.Before(before) {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	h := m.heads[partition]
	h.AnchorSeq, h.AnchorHash = rs[n-1].Seq, rs[n-1].Hash
	m.heads[partition] = h
	for _, r := range rs[:n] {
		delete(m.keys, r.Key)
	}
	m.recs[partition] = slices.Clone(rs[n:])
	return n, nil
}

// Tamper replaces the record of partition and seq with what f makes of
// it, without rehashing: for tests of Verify.
func (m *Memory) Tamper(partition string, seq uint64, f func(*Record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.recs[partition] {
		if m.recs[partition][i].Seq == seq {
			f(&m.recs[partition][i])
		}
	}
}

// Close implements Store.
func (m *Memory) Close() error { return nil }
