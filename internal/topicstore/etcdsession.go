package topicstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// sessMember is a session's member held on the sessions' lease: what to put
// again on a new lease if that one is lost.
type sessMember struct {
	rec    *SubscriptionRecord
	member string
}

// SubscribeSession implements Store: the member's key is on a lease of
// this store's, which a goroutine keeps alive until Close (that revokes
// it). If the lease is lost all the same (etcd unreachable for longer than
// SessionTTL), the keeper puts the members held on a new one, creating
// their subscriptions again if they were pruned meanwhile.
func (s *EtcdStore) SubscribeSession(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	lease, err := s.sessionLease(ctx)
	if err != nil {
		return nil, err
	}
	out, err := s.subscribe(ctx, rec, member, lease)
	if err != nil {
		return nil, err
	}
	s.sessMu.Lock()
	s.sessHeld[s.memberPrefix(rec.GetId())+member] = sessMember{rec: proto.Clone(rec).(*SubscriptionRecord), member: member}
	s.sessMu.Unlock()
	return out, nil
}

// sessionLease returns the sessions' lease, granting it (and starting its
// keeper) if there is none.
func (s *EtcdStore) sessionLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.closed {
		return 0, errs.New(codes.Unavailable, "topics: the store is closed")
	}
	if s.sessLease != 0 {
		return s.sessLease, nil
	}
	octx, cancel := bound(ctx, s.OpTimeout)
	defer cancel()
	l, err := s.cli.Grant(octx, int64(max(s.SessionTTL/time.Second, 2)))
	if err != nil {
		return 0, etcderr.FromCall(ctx, err, "topics: grant the sessions' lease")
	}
	s.sessLease = l.ID
	if s.sessStop == nil {
		kctx, stop := context.WithCancel(context.Background())
		s.sessStop, s.sessDone = stop, make(chan struct{})
		go s.keepSessions(kctx)
	}
	return l.ID, nil
}

// keepSessions renews the sessions' lease a third of its TTL at a time;
// when etcd says it is gone, it grants another and puts the members held
// on it again.
func (s *EtcdStore) keepSessions(ctx context.Context) {
	defer close(s.sessDone)
	every := max(s.SessionTTL/3, 500*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(every)
		s.sessMu.Lock()
		lease := s.sessLease
		s.sessMu.Unlock()
		octx, cancel := bound(ctx, s.OpTimeout)
		_, err := s.cli.KeepAliveOnce(octx, lease)
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
			continue
		case !errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.logger.Warn("topics: renewing the sessions' lease failed; retrying", "err", etcderr.Wrap(err))
			continue
		}
		s.logger.Warn("topics: the sessions' lease expired; putting their subscriptions on a new one")
		s.sessMu.Lock()
		if s.sessLease == lease {
			s.sessLease = 0
		}
		held := make([]sessMember, 0, len(s.sessHeld))
		for _, m := range s.sessHeld {
			held = append(held, m)
		}
		s.sessMu.Unlock()
		for _, m := range held {
			if _, err := s.SubscribeSession(ctx, m.rec, m.member); err != nil && ctx.Err() == nil {
				s.logger.Warn("topics: could not restore a session's subscription", "subscription", m.rec.GetId(), "session", m.member, "err", err)
			}
		}
	}
}

// Close stops renewing the sessions' lease and revokes it: the sessions'
// members go, and their subscriptions are pruned. The Service closes its
// store if it has a Close.
func (s *EtcdStore) Close() error {
	s.sessMu.Lock()
	s.closed = true
	stop, done, lease := s.sessStop, s.sessDone, s.sessLease
	s.sessMu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	<-done
	if lease == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.OpTimeout)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return etcderr.FromCall(ctx, err, "topics: revoke the sessions' lease")
	}
	return nil
}

// Prune implements Store.
func (s *EtcdStore) Prune(ctx context.Context, id string) (bool, error) {
	octx, cancel := bound(ctx, s.OpTimeout)
	resp, err := s.cli.Get(octx, s.subKey(id))
	cancel()
	if err != nil {
		return false, etcderr.FromCall(ctx, err, "prune %s", id)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(s.subKey(id)),
		clientv3.OpDelete(s.fullKey(id)),
		clientv3.OpDelete(s.queuePrefix(id), clientv3.WithPrefix()),
		clientv3.OpDelete(s.deadPrefix(id), clientv3.WithPrefix()),
	}
	rec := &SubscriptionRecord{}
	if proto.Unmarshal(resp.Kvs[0].Value, rec) == nil {
		if p, err := ParsePattern(rec.GetPattern(), ""); err == nil {
			ops = append(ops, clientv3.OpPut(s.verKey(p.Owner), ""), clientv3.OpDelete(s.curKey(p.Owner, id)))
		}
	}
	octx, cancel = bound(ctx, s.OpTimeout)
	defer cancel()
	// A range compare holds for every key of the range, and for an empty
	// range as for one absent key: no member, CreateRevision 0.
	tr, err := s.cli.Txn(octx).If(
		clientv3.Compare(clientv3.ModRevision(s.subKey(id)), "=", resp.Kvs[0].ModRevision),
		clientv3.Compare(clientv3.CreateRevision(s.memberPrefix(id)).WithPrefix(), "=", 0),
	).Then(ops...).Commit()
	if err != nil {
		return false, etcderr.FromCall(ctx, err, "prune %s", id)
	}
	if tr.Succeeded {
		s.txns.Add(1)
	}
	return tr.Succeeded, nil
}
