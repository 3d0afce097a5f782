package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Compaction. etcd keeps every revision of every key until it compacts its
// history, so a store that writes and deletes steadily (the topics' queues:
// each message is written, then deleted when acknowledged) grows by every
// write although it holds little. The compactor keeps it flat: every
// CompactInterval it notes etcd's revision, and compacts the history up to
// the revision it noted one interval before. A watcher is so at least one
// interval behind before its revision can be compacted away, and the
// watchers of agentsilo then read afresh and go on (they handle
// ErrCompacted).
//
// Every silo runs its compactor: compacting to a revision compacted
// already is a no-op (ErrCompacted, ignored), so a cluster needs no
// election, and the history kept is the longest of the silos' intervals
// at most.

// DefaultCompactInterval is Config.CompactInterval's default.
const DefaultCompactInterval = 5 * time.Minute

// startCompactor runs the compactor until Close, if e.cfg.CompactInterval
// is positive.
func (e *Store) startCompactor() {
	if e.cfg.CompactInterval <= 0 {
		return
	}
	clk := e.cfg.clk
	if clk == nil {
		clk = clock.Real{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.compactStop = cancel
	e.compactDone = make(chan struct{})
	go func() {
		defer close(e.compactDone)
		t := clk.NewTimer(e.cfg.CompactInterval)
		defer t.Stop()
		var noted int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			rev, err := e.CompactOnce(ctx, noted)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				e.cfg.Logger.Warn("etcd: compaction failed; trying again at the next interval", "revision", noted, "err", err)
			default:
				noted = rev
			}
			t.Reset(e.cfg.CompactInterval)
		}
	}()
}

// stopCompactor stops the compactor and waits for it.
func (e *Store) stopCompactor() {
	if e.compactStop != nil {
		e.compactStop()
		<-e.compactDone
	}
}

// CompactOnce compacts etcd's history up to revision rev (nothing if rev is
// 0, or compacted already) and returns etcd's current revision, which the
// compactor passes to the next call. It is one step of the compactor, for
// callers that compact on their own schedule (tests, benchmarks).
func (e *Store) CompactOnce(ctx context.Context, rev int64) (int64, error) {
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := e.client.Get(octx, e.cfg.Prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, etcderr.FromCall(ctx, err, "etcd: read the revision")
	}
	if rev > 0 {
		// Physical: it returns once the space is free for reuse, so that
		// what the next interval writes fills it rather than grow the file.
		if _, err := e.client.Compact(octx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return 0, etcderr.FromCall(ctx, err, "etcd: compact at revision %d", rev)
		}
	}
	return resp.Header.Revision, nil
}
