package a2a

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Retention: a task that reaches a terminal state (completed, failed,
// canceled, rejected) is written on an etcd lease that expires
// Config.TaskRetention later (at most one reuse window more), and etcd
// removes it then; so are its push configs, put on the same lease in the
// terminal write's wake (and a config saved later for a terminal task is
// saved on the task's lease). Nothing sweeps: etcd's lease expiry does the
// work, on whichever silo is alive. Tasks resting in input-required or
// auth-required are kept, as are working ones.
//
// The tasks that end within one window share a lease (as Kubernetes does
// for events), so a busy cluster holds about retention/window leases, not
// one per task.

// retainer hands out the leases of terminal tasks.
type retainer struct {
	cli       *clientv3.Client
	retention time.Duration // 0: tasks are kept
	window    time.Duration // how long one lease is handed out

	mu    sync.Mutex
	id    clientv3.LeaseID
	until time.Time // id is handed out until then
}

func newRetainer(cli *clientv3.Client, retention time.Duration) *retainer {
	return &retainer{cli: cli, retention: retention, window: min(max(retention/100, time.Second), time.Minute)}
}

// lease returns the lease a task that ends now is written on: it expires
// at least retention from now. 0 when tasks are kept.
func (r *retainer) lease(ctx context.Context) (clientv3.LeaseID, error) {
	if r == nil || r.retention <= 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.id != 0 && now.Before(r.until) {
		return r.id, nil
	}
	ttl := int64(math.Ceil((r.retention + r.window).Seconds()))
	resp, err := r.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, etcderr.FromCall(ctx, err, "a2a: task retention lease")
	}
	r.id, r.until = resp.ID, now.Add(r.window)
	return r.id, nil
}

// forget drops id, a lease etcd no longer has, so that the next call grants
// another.
func (r *retainer) forget(id clientv3.LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id == id {
		r.id = 0
	}
}

// leaseGone reports whether err says that a lease does not exist.
func leaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// retainPushConfigs puts the push configs of task id, read in its
// terminal write (kvs), on the task's lease, each only if unchanged since:
// one that changed was written by a Save, which put it on the lease. A
// failure is logged: those configs stay until the task is deleted by hand.
func (s *taskStore) retainPushConfigs(ctx context.Context, id spec.TaskID, lease clientv3.LeaseID, kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		if clientv3.LeaseID(kv.Lease) == lease {
			continue
		}
		_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpPut(string(kv.Key), string(kv.Value), clientv3.WithLease(lease))).Commit()
		if err != nil && s.logger != nil {
			s.logger.Warn("a2a: a push config of a finished task could not be put on its retention lease", "task", id, "err", err)
		}
	}
}
