// Package etcdwatch keeps a caller's view of some etcd keys in step with
// etcd: it reads them all, then follows a watch from the revision read. The
// parts of a silo that hold such a view (the declared types, the service
// directory, the ACL, the dashboard's watched mark) share this one loop
// instead of each writing its own.
//
// A Follower
//
//   - reads the key, or every key under the prefix, and hands them to Load
//     with the revision read: the caller replaces its view with them;
//   - watches from the next revision, with progress notifications (so the
//     revision moves on while nothing changes), and hands each response's
//     events to Events;
//   - when the watch breaks (etcd away or without a leader, the revision
//     compacted, the watch canceled), tells Failed, waits (the
//     retry.EtcdWatch backoff, on its clock) and reads everything again, so
//     the caller rebuilds its view from a fresh read, then watches from
//     there; a read that fails is told and retried the same way;
//   - stops when its context ends.
//
// Run does all of it. A caller that must hold its view before it goes on
// calls Read, then Follow (in a goroutine of its own) with the revision
// Read returned.
//
// Load, Events and Failed are called one at a time, from the goroutine
// that runs Read, Follow or Run.
package etcdwatch

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// DefaultTimeout bounds a read when Follower.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// Follower follows one key, or the keys under one prefix. Set its fields,
// then call Run, or Read and Follow; don't change them while it runs.
type Follower struct {
	Client *clientv3.Client
	// Key is the key followed; with Prefix, every key that starts with it.
	Key    string
	Prefix bool
	// What says what a read is, to begin its errors ("directory: read
	// the entries"). Default: "read " and the key.
	What string
	// Timeout bounds each read. Default: DefaultTimeout.
	Timeout time.Duration
	// Clock paces the waits between attempts. Nil: the real clock.
	Clock clock.Clock

	// Load receives everything read (nothing if no key is stored) and the
	// revision of the read. An error makes the read count as failed: it
	// is told to Failed and retried. Nil: ignored.
	Load func(kvs []*mvccpb.KeyValue, rev int64) error
	// Events receives the events of one watch response, in order (none
	// for a progress notification), and the revision the view is at
	// once they are applied. Nil: ignored.
	Events func(evs []*clientv3.Event, rev int64)
	// Failed is told each failed read or broken watch, before the wait
	// that follows it; not a context that ended. Nil: ignored.
	Failed func(err error)
}

// Read reads the key or the keys under the prefix, hands them to Load, and
// returns the revision read.
func (f *Follower) Read(ctx context.Context) (int64, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var opts []clientv3.OpOption
	if f.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := f.Client.Get(rctx, f.Key, opts...)
	if err != nil {
		what := f.What
		if what == "" {
			what = "read " + f.Key
		}
		return 0, etcderr.FromCall(ctx, err, "%s", what)
	}
	rev := resp.Header.Revision
	if f.Load != nil {
		if err := f.Load(resp.Kvs, rev); err != nil {
			return 0, err
		}
	}
	return rev, nil
}

// Run reads, retrying until a read succeeds, then follows from the
// revision read, until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	b := retry.EtcdWatch.New(f.Clock)
	rev, err := f.Read(ctx)
	if err != nil {
		var ok bool
		if rev, ok = f.readAgain(ctx, b, err); !ok {
			return
		}
	}
	f.follow(ctx, b, rev)
}

// Follow follows the changes after rev (the revision of a Read), reading
// everything again whenever the watch breaks, until ctx ends.
func (f *Follower) Follow(ctx context.Context, rev int64) {
	f.follow(ctx, retry.EtcdWatch.New(f.Clock), rev)
}

func (f *Follower) follow(ctx context.Context, b *retry.Backoff, rev int64) {
	for {
		err := f.watch(ctx, rev)
		var ok bool
		if rev, ok = f.readAgain(ctx, b, err); !ok {
			return
		}
	}
}

// readAgain tells err, then waits and reads until a read succeeds (its
// revision, true) or ctx ends (false).
func (f *Follower) readAgain(ctx context.Context, b *retry.Backoff, err error) (int64, bool) {
	for ctx.Err() == nil {
		if f.Failed != nil {
			f.Failed(err)
		}
		if !b.Wait(ctx, nil) {
			break
		}
		var rev int64
		if rev, err = f.Read(ctx); err == nil {
			b.Reset()
			return rev, true
		}
	}
	return 0, false
}

// watch hands over the changes after rev until the watch breaks, and
// returns why.
func (f *Follower) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithProgressNotify()}
	if f.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for resp := range f.Client.Watch(wctx, f.Key, opts...) {
		if err := resp.Err(); err != nil {
			// Compacted past rev, canceled, or no leader.
			return etcderr.Wrap(err)
		}
		if f.Events != nil {
			f.Events(resp.Events, resp.Header.Revision)
		}
	}
	return errs.New(codes.Unavailable, "the etcd watch of %s ended", f.Key)
}
