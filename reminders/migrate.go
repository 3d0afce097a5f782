package reminders

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/retry"
)

// Reminders of the legacy layout (<prefix>reminders/<address>/<name>,
// before buckets) are moved to their buckets by every Service: once at
// start, before it loads any bucket (so that a silo restarted on old data
// fires the ticks it missed while down once, as it would have), then as they
// appear, for as long as silos of an earlier version write them (a rolling
// upgrade). Each move is one transaction per batch: the new key is written
// unless it exists already (registered again meanwhile: that one wins), and
// the old key is deleted if unchanged since read, so that moves by several
// silos at once neither lose nor duplicate a reminder. Silos of an earlier
// version stop firing what moved (they see the delete).

// migrateBatch is the keys moved per transaction (etcd allows 128
// operations per transaction by default: two per key).
const migrateBatch = 64

// legacy moves the legacy layout's reminders, then watches for more; the
// first pass closes s.migrated.
func (s *Service) legacy() {
	defer s.wg.Done()
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for s.ctx.Err() == nil {
		rev, err := s.migrateAll()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.warn("reminders: moving reminders of the old layout failed; retrying", "err", err)
			if !b.Wait(s.ctx, nil) {
				return
			}
			continue
		}
		select {
		case <-s.migrated:
		default:
			close(s.migrated)
			s.mu.Lock()
			s.markLoadedLocked()
			s.mu.Unlock()
		}
		b.Reset()
		from := rev + 1
		for s.ctx.Err() == nil {
			from, err = s.watchLegacy(from)
			if err == errCompacted || s.ctx.Err() != nil {
				break
			}
			s.warn("reminders: watching the old layout failed; resuming", "err", err, "from_revision", from)
			if !b.Wait(s.ctx, nil) {
				return
			}
		}
	}
}

// migrateAll moves every legacy reminder, page by page, and returns the
// revision of the first read: a watch from there misses none.
func (s *Service) migrateAll() (int64, error) {
	var rev int64
	key, end := s.keys.legacy, clientv3.GetPrefixRangeEnd(s.keys.legacy)
	for {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.OpTimeout)
		resp, err := s.cfg.Client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(int64(s.cfg.PageSize)))
		cancel()
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if err := s.migrate(resp.Kvs); err != nil {
			return 0, err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// watchLegacy moves legacy reminders as they are written, until the watch
// fails; it returns the revision to resume from.
func (s *Service) watchLegacy(from int64) (int64, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	wch := s.cfg.Client.Watch(ctx, s.keys.legacy, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterDelete())
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return from, errCompacted
		}
		if err := resp.Err(); err != nil {
			return from, err
		}
		var kvs []*mvccpb.KeyValue
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.PUT {
				kvs = append(kvs, ev.Kv)
			}
		}
		if err := s.migrate(kvs); err != nil {
			return from, err
		}
		if n := len(resp.Events); n > 0 {
			from = resp.Events[n-1].Kv.ModRevision + 1
		}
	}
	if err := s.ctx.Err(); err != nil {
		return from, err
	}
	return from, errors.New("reminders: watch closed")
}

// migrate moves kvs (legacy keys) to their buckets, a batch per
// transaction; a batch whose transaction fails its conditions is moved key
// by key. An unreadable key stays where it is, with a warning.
func (s *Service) migrate(kvs []*mvccpb.KeyValue) error {
	for len(kvs) > 0 {
		n := min(len(kvs), migrateBatch)
		batch := kvs[:n]
		kvs = kvs[n:]
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		var one [][2]clientv3.Op // per key: the move, and the delete alone
		var moved []*mvccpb.KeyValue
		for _, kv := range batch {
			old := string(kv.Key)
			addr, name, err := s.keys.parseLegacy(old)
			if err == nil {
				_, err = decode(name, kv.Value)
			}
			if err != nil {
				s.cfg.Logger.Warn("reminders: skipping unreadable reminder of the old layout", "key", old, "err", err)
				continue
			}
			nk := s.keys.of(addr, name)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(old), "=", kv.ModRevision), clientv3.Compare(clientv3.CreateRevision(nk), "=", 0))
			ops = append(ops, clientv3.OpPut(nk, string(kv.Value)), clientv3.OpDelete(old))
			one = append(one, [2]clientv3.Op{
				clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(nk), "=", 0)}, []clientv3.Op{clientv3.OpPut(nk, string(kv.Value))}, nil),
				clientv3.OpDelete(old),
			})
			moved = append(moved, kv)
		}
		if len(ops) == 0 {
			continue
		}
		ok, err := s.txn(cmps, ops)
		if err != nil {
			return err
		}
		if ok {
			s.migratedN.Add(int64(len(moved)))
			continue
		}
		// Some key changed or exists already: key by key, the old key's
		// revision still checked.
		for i, kv := range moved {
			ok, err := s.txn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}, one[i][:])
			if err != nil {
				return err
			}
			if ok {
				s.migratedN.Add(1)
			}
		}
	}
	return nil
}

func (s *Service) txn(cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.OpTimeout)
	defer cancel()
	resp, err := s.cfg.Client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
