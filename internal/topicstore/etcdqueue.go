package topicstore

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Update implements Store: a record of the log followed here is held
// apart from then on, with its delivery state and its place; a held entry
// is replaced.
func (s *EtcdStore) Update(ctx context.Context, id, key string, e *Entry) error {
	l := s.follower(id)
	if l != nil {
		if pos, ok := l.open(key); ok {
			val, err := encodeHeld(e, pos)
			if err != nil {
				return err
			}
			octx, cancel := bound(ctx, s.OpTimeout)
			_, err = s.cli.Put(octx, s.queuePrefix(id)+key, string(val))
			cancel()
			if err != nil {
				return etcderr.FromCall(ctx, err, "record a failed delivery")
			}
			s.txns.Add(1)
			l.settle(key, true)
			s.advance(ctx, l)
			return nil
		}
	}
	k := s.queuePrefix(id) + key
	octx, cancel := bound(ctx, s.OpTimeout)
	resp, err := s.cli.Get(octx, k)
	cancel()
	if err != nil {
		return etcderr.FromCall(ctx, err, "record a failed delivery")
	}
	if len(resp.Kvs) == 0 {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	val, err := encodeHeld(e, heldPos(resp.Kvs[0].Value))
	if err != nil {
		return err
	}
	octx, cancel = bound(ctx, s.OpTimeout)
	tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", resp.Kvs[0].CreateRevision)).Then(clientv3.OpPut(k, string(val))).Commit()
	cancel()
	if err != nil {
		return etcderr.FromCall(ctx, err, "record a failed delivery")
	}
	s.txns.Add(1)
	if !tr.Succeeded {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	return nil
}

// Kill implements Store: a record of the log followed here is settled, a
// held entry deleted, in the transaction that writes the dead letter.
func (s *EtcdStore) Kill(ctx context.Context, id, key string, d *DeadLetter) error {
	d = proto.Clone(d).(*DeadLetter)
	d.Id = key
	val, err := proto.Marshal(d)
	if err != nil {
		return errs.New(codes.Internal, "dead letter: %w", err)
	}
	dk := s.deadPrefix(id) + key
	if l := s.follower(id); l != nil {
		if _, ok := l.open(key); ok {
			octx, cancel := bound(ctx, s.OpTimeout)
			_, err := s.cli.Put(octx, dk, string(val))
			cancel()
			if err != nil {
				return etcderr.FromCall(ctx, err, "dead letter")
			}
			s.txns.Add(1)
			l.settle(key, false)
			s.advance(ctx, l)
			return nil
		}
	}
	k := s.queuePrefix(id) + key
	octx, cancel := bound(ctx, s.OpTimeout)
	tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).
		Then(clientv3.OpDelete(k), clientv3.OpPut(dk, string(val))).Commit()
	cancel()
	if err != nil {
		return etcderr.FromCall(ctx, err, "dead letter")
	}
	s.txns.Add(1)
	if !tr.Succeeded {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	return nil
}

// SetFull implements Store.
func (s *EtcdStore) SetFull(ctx context.Context, id string, full bool) error {
	octx, cancel := bound(ctx, s.OpTimeout)
	defer cancel()
	var err error
	if full {
		_, err = s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(s.subKey(id)), ">", 0)).Then(clientv3.OpPut(s.fullKey(id), "")).Commit()
	} else {
		_, err = s.cli.Delete(octx, s.fullKey(id))
	}
	if err != nil {
		return etcderr.FromCall(ctx, err, "mark the backlog of %s", id)
	}
	s.txns.Add(1)
	return nil
}

// DeadLetters implements Store.
func (s *EtcdStore) DeadLetters(ctx context.Context, id, after string, limit int) ([]*DeadLetter, bool, error) {
	prefix := s.deadPrefix(id)
	from := prefix
	if after != "" {
		from = prefix + after + "\x00"
	}
	octx, cancel := bound(ctx, s.OpTimeout)
	resp, err := s.cli.Get(octx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(int64(limit)+1))
	cancel()
	if err != nil {
		return nil, false, etcderr.FromCall(ctx, err, "list dead letters of %s", id)
	}
	var out []*DeadLetter
	for _, kv := range resp.Kvs {
		if len(out) == limit {
			return out, true, nil
		}
		d := &DeadLetter{}
		if err := proto.Unmarshal(kv.Value, d); err != nil {
			s.logger.Warn("topics: skipping an unreadable dead letter", "key", string(kv.Key), "err", err)
			continue
		}
		d.Id = strings.TrimPrefix(string(kv.Key), prefix)
		out = append(out, d)
	}
	return out, false, nil
}

// deadKeys returns the keys of subscription id's dead letters: keys, or,
// for nil, all of them.
func (s *EtcdStore) deadKeys(ctx context.Context, id string, keys []string) ([]string, error) {
	if keys != nil {
		return keys, nil
	}
	kvs, _, err := s.loadAll(ctx, s.deadPrefix(id))
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "list dead letters of %s", id)
	}
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = strings.TrimPrefix(string(kv.Key), s.deadPrefix(id))
	}
	return out, nil
}

// Replay implements Store.
func (s *EtcdStore) Replay(ctx context.Context, id string, keys []string) (int, error) {
	keys, err := s.deadKeys(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		dk := s.deadPrefix(id) + k
		octx, cancel := bound(ctx, s.OpTimeout)
		resp, err := s.cli.Get(octx, dk)
		cancel()
		if err != nil {
			return n, etcderr.FromCall(ctx, err, "replay %s", k)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		d := &DeadLetter{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, d); err != nil {
			return n, errs.New(codes.Internal, "dead letter %s: unreadable: %w", k, err)
		}
		val, err := proto.Marshal(&Entry{Message: d.GetMessage()})
		if err != nil {
			return n, errs.New(codes.Internal, "replay: %w", err)
		}
		octx, cancel = bound(ctx, s.OpTimeout)
		tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(dk), "=", resp.Kvs[0].ModRevision),
			clientv3.Compare(clientv3.CreateRevision(s.subKey(id)), ">", 0)).
			Then(clientv3.OpDelete(dk), clientv3.OpPut(s.queuePrefix(id)+s.newKey(), string(val))).Commit()
		cancel()
		if err != nil {
			return n, etcderr.FromCall(ctx, err, "replay %s", k)
		}
		s.txns.Add(1)
		if tr.Succeeded {
			n++
		}
	}
	return n, nil
}

// Drop implements Store.
func (s *EtcdStore) Drop(ctx context.Context, id string, keys []string) (int, error) {
	keys, err := s.deadKeys(ctx, id, keys)
	if err != nil {
		return 0, err
	}
	n := 0
	for len(keys) > 0 {
		m := min(len(keys), s.MaxOps)
		ops := make([]clientv3.Op, m)
		for i, k := range keys[:m] {
			ops[i] = clientv3.OpDelete(s.deadPrefix(id) + k)
		}
		octx, cancel := bound(ctx, s.OpTimeout)
		tr, err := s.cli.Txn(octx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return n, etcderr.FromCall(ctx, err, "drop dead letters of %s", id)
		}
		s.txns.Add(1)
		for _, r := range tr.Responses {
			n += int(r.GetResponseDeleteRange().GetDeleted())
		}
		keys = keys[m:]
	}
	return n, nil
}
