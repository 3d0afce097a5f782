package topics

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcdbatch"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// EtcdStore is the Store of a cluster, in etcd under <prefix>topics/:
//
//	reg/sub/<id>              a subscription (SubscriptionRecord)
//	reg/member/<id>/<agent>   one of its members
//	reg/ver/<owner>           bumped when a subscription to the owner's topics
//	                          comes or goes: its ModRevision is the version
//	                          every Append compares
//	reg/full/<id>             present while the subscription's backlog is full
//	q/<id>/<key>              a queued message (TopicEntry)
//	dead/<id>/<key>           a dead letter (DeadLetter)
//	idem/<scope>/<key>        an idempotency key, on a lease of the window
//
// A queue's order is the entries' etcd CreateRevision, then their keys: the
// keys one EtcdStore makes increase, so the entries of one transaction keep
// the order in which they were given to Append.
//
// Publishes (Append) and acknowledgements (Ack) are written with group
// commit (see etcdappend.go), in transactions shared with the other writes
// of its etcd client that arrive together.
type EtcdStore struct {
	cli    *clientv3.Client
	batch  *etcdbatch.Batcher // its writes and others', in shared transactions
	root   string
	logger *slog.Logger

	// OpTimeout bounds each etcd request. Default 5 s.
	OpTimeout time.Duration
	// MaxOps and MaxBytes bound one transaction (etcd's --max-txn-ops and
	// --max-request-bytes, less a margin): a published item whose copies
	// take more than half of one is written in several. Default 128 and
	// 1 MiB.
	MaxOps, MaxBytes int
	// Window is how long an idempotency key is remembered. Default 10 min.
	Window time.Duration

	keyPrefix string // unique to this store: the keys it makes
	keySeq    atomic.Uint64

	leaseMu sync.Mutex
	lease   clientv3.LeaseID
	leaseAt time.Time

	txns atomic.Uint64 // transactions that wrote, for the figures

	// testHookLoaded, if set, runs in follow after each load, before the
	// watch from the loaded revision starts.
	testHookLoaded func()

	// SessionTTL is the TTL of the lease of the sessions' members
	// (SubscribeSession): how long they outlive this store's process.
	// Default 15 s.
	SessionTTL time.Duration

	sessMu    sync.Mutex
	sessLease clientv3.LeaseID
	sessHeld  map[string]sessMember // by member key: what to put again on a new lease
	sessStop  context.CancelFunc    // nil until the keeper runs
	sessDone  chan struct{}
	closed    bool
}

type sessMember struct {
	rec    *SubscriptionRecord
	member string
}

// NewEtcdStore returns the store under prefix (which ends in "/").
func NewEtcdStore(cli *clientv3.Client, prefix string, logger *slog.Logger) *EtcdStore {
	if logger == nil {
		logger = slog.Default()
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &EtcdStore{
		cli:        cli,
		batch:      etcdbatch.Of(cli),
		root:       prefix + "topics/",
		logger:     logger,
		OpTimeout:  5 * time.Second,
		MaxOps:     128,
		MaxBytes:   1 << 20,
		Window:     DefaultIdemWindow,
		SessionTTL: 15 * time.Second,
		sessHeld:   map[string]sessMember{},
		keyPrefix:  hex.EncodeToString(b[:]) + "-",
	}
}

var _ Store = (*EtcdStore)(nil)

// Txns returns how many write transactions the store's writes took part
// in (shared with others' for publishes and acknowledgements).
func (s *EtcdStore) Txns() uint64 { return s.txns.Load() }

func (s *EtcdStore) subKey(id string) string       { return s.root + "reg/sub/" + id }
func (s *EtcdStore) memberPrefix(id string) string { return s.root + "reg/member/" + id + "/" }
func (s *EtcdStore) verKey(owner string) string    { return s.root + "reg/ver/" + owner }
func (s *EtcdStore) fullKey(id string) string      { return s.root + "reg/full/" + id }
func (s *EtcdStore) queuePrefix(id string) string  { return s.root + "q/" + id + "/" }
func (s *EtcdStore) deadPrefix(id string) string   { return s.root + "dead/" + id + "/" }
func (s *EtcdStore) idemKey(k string) string       { return s.root + "idem/" + k }
func (s *EtcdStore) regPrefix() string             { return s.root + "reg/" }
func (s *EtcdStore) newKey() string                { return fmt.Sprintf("%s%016x", s.keyPrefix, s.keySeq.Add(1)) }

func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Subscribe implements Store.
func (s *EtcdStore) Subscribe(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	return s.subscribe(ctx, rec, member, 0)
}

// subscribe is Subscribe with the member's key on lease (0: none).
func (s *EtcdStore) subscribe(ctx context.Context, rec *SubscriptionRecord, member string, lease clientv3.LeaseID) (*SubscriptionRecord, error) {
	var mopts []clientv3.OpOption
	if lease != 0 {
		mopts = append(mopts, clientv3.WithLease(lease))
	}
	p, err := ParsePattern(rec.GetPattern(), "")
	if err != nil {
		return nil, err
	}
	val, err := proto.Marshal(rec)
	if err != nil {
		return nil, errs.New(codes.Internal, "subscribe: %v", err)
	}
	for range 16 {
		octx, cancel := bound(ctx, s.OpTimeout)
		resp, err := s.cli.Get(octx, s.subKey(rec.GetId()))
		cancel()
		if err != nil {
			return nil, etcderr.FromCall(ctx, err, "subscribe %s", rec.GetId())
		}
		var t clientv3.Txn
		octx, cancel = bound(ctx, s.OpTimeout)
		cur := rec
		if len(resp.Kvs) > 0 {
			cur = &SubscriptionRecord{}
			if err := proto.Unmarshal(resp.Kvs[0].Value, cur); err != nil {
				cancel()
				return nil, errs.New(codes.Internal, "subscription %s: unreadable: %v", rec.GetId(), err)
			}
			if cur.GetPattern() != rec.GetPattern() {
				cancel()
				return nil, errs.New(codes.FailedPrecondition, "subscription %s exists with pattern %s, not %s", rec.GetId(), cur.GetPattern(), rec.GetPattern())
			}
			t = s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(s.subKey(rec.GetId())), "=", resp.Kvs[0].CreateRevision)).
				Then(clientv3.OpPut(s.memberPrefix(rec.GetId())+member, "", mopts...))
		} else {
			t = s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(s.subKey(rec.GetId())), "=", 0)).
				Then(clientv3.OpPut(s.subKey(rec.GetId()), string(val)),
					clientv3.OpPut(s.memberPrefix(rec.GetId())+member, "", mopts...),
					clientv3.OpPut(s.verKey(p.Owner), ""))
		}
		tr, err := t.Commit()
		cancel()
		if err != nil {
			return nil, etcderr.FromCall(ctx, err, "subscribe %s", rec.GetId())
		}
		s.txns.Add(1)
		if tr.Succeeded {
			return proto.Clone(cur).(*SubscriptionRecord), nil
		}
	}
	return nil, errs.New(codes.Aborted, "subscribe %s: too many concurrent changes; retry", rec.GetId())
}

// Unsubscribe implements Store.
func (s *EtcdStore) Unsubscribe(ctx context.Context, id, member string) (bool, error) {
	mk := s.memberPrefix(id) + member
	s.sessMu.Lock()
	delete(s.sessHeld, mk)
	s.sessMu.Unlock()
	for range 16 {
		octx, cancel := bound(ctx, s.OpTimeout)
		rr, err := s.cli.Txn(octx).Then(
			clientv3.OpGet(s.memberPrefix(id), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(s.subKey(id)),
		).Commit()
		cancel()
		if err != nil {
			return false, etcderr.FromCall(ctx, err, "unsubscribe %s", id)
		}
		members := rr.Responses[0].GetResponseRange().GetKvs()
		subs := rr.Responses[1].GetResponseRange().GetKvs()
		found := false
		for _, kv := range members {
			if string(kv.Key) == mk {
				found = true
			}
		}
		if !found {
			return false, errs.New(codes.NotFound, "%s is not subscribed to %s", member, id)
		}
		last := len(members) == 1
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mk), ">", 0)}
		ops := []clientv3.Op{clientv3.OpDelete(mk)}
		if last {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.memberPrefix(id)).WithPrefix(), "<", rr.Header.Revision+1))
			ops = append(ops,
				clientv3.OpDelete(s.subKey(id)),
				clientv3.OpDelete(s.fullKey(id)),
				clientv3.OpDelete(s.queuePrefix(id), clientv3.WithPrefix()),
				clientv3.OpDelete(s.deadPrefix(id), clientv3.WithPrefix()))
			if len(subs) > 0 {
				rec := &SubscriptionRecord{}
				if proto.Unmarshal(subs[0].Value, rec) == nil {
					if p, err := ParsePattern(rec.GetPattern(), ""); err == nil {
						ops = append(ops, clientv3.OpPut(s.verKey(p.Owner), ""))
					}
				}
			}
		}
		octx, cancel = bound(ctx, s.OpTimeout)
		tr, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return false, etcderr.FromCall(ctx, err, "unsubscribe %s", id)
		}
		s.txns.Add(1)
		if tr.Succeeded {
			return last, nil
		}
	}
	return false, errs.New(codes.Aborted, "unsubscribe %s: too many concurrent changes; retry", id)
}

// errCompacted: the revision to resume a watch from is gone; read again.
var errCompacted = errors.New("topics: watch revision compacted")

// follow loads the keys under prefix at one revision (in pages), hands
// them to load, then watches from the next revision and hands each
// response's events to apply, until ctx ends; it loads again after a
// compaction and retries with backoff while etcd is away.
func (s *EtcdStore) follow(ctx context.Context, prefix, what string, load func(kvs []*mvccpb.KeyValue), apply func(evs []*clientv3.Event)) {
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for ctx.Err() == nil {
		kvs, rev, err := s.loadAll(ctx, prefix)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("topics: loading from etcd failed; retrying", "what", what, "err", etcderr.Wrap(err))
			if !b.Wait(ctx, nil) {
				return
			}
			continue
		}
		load(kvs)
		b.Reset()
		if s.testHookLoaded != nil {
			s.testHookLoaded()
		}
		from := rev + 1
		for ctx.Err() == nil {
			from, err = s.watch(ctx, prefix, from, apply)
			if errors.Is(err, errCompacted) || ctx.Err() != nil {
				break
			}
			s.logger.Warn("topics: watching etcd failed; resuming", "what", what, "err", etcderr.Wrap(err), "from_revision", from)
			if !b.Wait(ctx, nil) {
				return
			}
		}
	}
}

// loadAll reads every key under prefix at one revision, in pages.
func (s *EtcdStore) loadAll(ctx context.Context, prefix string) ([]*mvccpb.KeyValue, int64, error) {
	var (
		out []*mvccpb.KeyValue
		rev int64
		key = prefix
		end = clientv3.GetPrefixRangeEnd(prefix)
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		octx, cancel := bound(ctx, s.OpTimeout)
		resp, err := s.cli.Get(octx, key, opts...)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		out = append(out, resp.Kvs...)
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (s *EtcdStore) watch(ctx context.Context, prefix string, from int64, apply func([]*clientv3.Event)) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if resp.CompactRevision != 0 {
			return from, errCompacted
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return from, errCompacted
			}
			return from, err
		}
		if len(resp.Events) > 0 {
			apply(resp.Events)
			from = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
		}
	}
	if err := ctx.Err(); err != nil {
		return from, err
	}
	return from, errors.New("topics: watch closed")
}

// FollowRegistry implements Store.
func (s *EtcdStore) FollowRegistry(ctx context.Context, f func(*Registry)) {
	var (
		versions map[string]int64
		recs     map[string]*SubscriptionRecord
		members  map[string]map[string]bool
		full     map[string]bool
	)
	reg := s.regPrefix()
	put := func(kv *mvccpb.KeyValue) {
		rest := strings.TrimPrefix(string(kv.Key), reg)
		kind, rest, _ := strings.Cut(rest, "/")
		switch kind {
		case "sub":
			rec := &SubscriptionRecord{}
			if err := proto.Unmarshal(kv.Value, rec); err != nil {
				s.logger.Warn("topics: skipping an unreadable subscription", "key", string(kv.Key), "err", err)
				return
			}
			recs[rest] = rec
		case "member":
			if id, m, ok := strings.Cut(rest, "/"); ok {
				if members[id] == nil {
					members[id] = map[string]bool{}
				}
				members[id][m] = true
			}
		case "ver":
			versions[rest] = kv.ModRevision
		case "full":
			full[rest] = true
		}
	}
	del := func(key string) {
		rest := strings.TrimPrefix(key, reg)
		kind, rest, _ := strings.Cut(rest, "/")
		switch kind {
		case "sub":
			delete(recs, rest)
		case "member":
			if id, m, ok := strings.Cut(rest, "/"); ok {
				delete(members[id], m)
				if len(members[id]) == 0 {
					delete(members, id)
				}
			}
		case "ver":
			delete(versions, rest)
		case "full":
			delete(full, rest)
		}
	}
	publish := func() {
		vs := make(map[string]int64, len(versions))
		for k, v := range versions {
			vs[k] = v
		}
		rs := make(map[string]*SubscriptionRecord, len(recs))
		ms := make(map[string][]string, len(members))
		fs := make(map[string]bool, len(full))
		for id, r := range recs {
			rs[id] = r
			for m := range members[id] {
				ms[id] = append(ms[id], m)
			}
			fs[id] = full[id]
		}
		f(NewRegistry(vs, rs, ms, fs))
	}
	s.follow(ctx, reg, "subscriptions", func(kvs []*mvccpb.KeyValue) {
		versions, recs, members, full = map[string]int64{}, map[string]*SubscriptionRecord{}, map[string]map[string]bool{}, map[string]bool{}
		for _, kv := range kvs {
			put(kv)
		}
		publish()
	}, func(evs []*clientv3.Event) {
		for _, ev := range evs {
			if ev.Type == mvccpb.DELETE {
				del(string(ev.Kv.Key))
			} else {
				put(ev.Kv)
			}
		}
		publish()
	})
}

// FollowQueue implements Store.
func (s *EtcdStore) FollowQueue(ctx context.Context, id string, f func(QueueEvent)) {
	prefix := s.queuePrefix(id)
	decode := func(kv *mvccpb.KeyValue) *Entry {
		e := &Entry{}
		if err := proto.Unmarshal(kv.Value, e); err != nil {
			s.logger.Warn("topics: skipping an unreadable queued message", "key", string(kv.Key), "err", err)
			return nil
		}
		return e
	}
	s.follow(ctx, prefix, "queue "+id, func(kvs []*mvccpb.KeyValue) {
		sort.SliceStable(kvs, func(i, j int) bool {
			if kvs[i].CreateRevision != kvs[j].CreateRevision {
				return kvs[i].CreateRevision < kvs[j].CreateRevision
			}
			return string(kvs[i].Key) < string(kvs[j].Key)
		})
		f(QueueEvent{Reset: true})
		for _, kv := range kvs {
			if e := decode(kv); e != nil {
				f(QueueEvent{Key: strings.TrimPrefix(string(kv.Key), prefix), Entry: e})
			}
		}
	}, func(evs []*clientv3.Event) {
		for _, ev := range evs {
			k := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			if ev.Type == mvccpb.DELETE {
				f(QueueEvent{Key: k})
			} else if e := decode(ev.Kv); e != nil {
				f(QueueEvent{Key: k, Entry: e, New: ev.IsCreate()})
			}
		}
	})
}

// Update implements Store.
func (s *EtcdStore) Update(ctx context.Context, id, key string, e *Entry) error {
	val, err := proto.Marshal(e)
	if err != nil {
		return errs.New(codes.Internal, "update: %v", err)
	}
	k := s.queuePrefix(id) + key
	octx, cancel := bound(ctx, s.OpTimeout)
	tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).Then(clientv3.OpPut(k, string(val))).Commit()
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

// Kill implements Store.
func (s *EtcdStore) Kill(ctx context.Context, id, key string, d *DeadLetter) error {
	d = proto.Clone(d).(*DeadLetter)
	d.Id = key
	val, err := proto.Marshal(d)
	if err != nil {
		return errs.New(codes.Internal, "dead letter: %v", err)
	}
	k := s.queuePrefix(id) + key
	octx, cancel := bound(ctx, s.OpTimeout)
	tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).
		Then(clientv3.OpDelete(k), clientv3.OpPut(s.deadPrefix(id)+key, string(val))).Commit()
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
			return n, errs.New(codes.Internal, "dead letter %s: unreadable: %v", k, err)
		}
		val, err := proto.Marshal(&Entry{Message: d.GetMessage()})
		if err != nil {
			return n, errs.New(codes.Internal, "replay: %v", err)
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
			ops = append(ops, clientv3.OpPut(s.verKey(p.Owner), ""))
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

// Subscriptions implements Store: one transaction reads the owner's
// subscriptions, members and full flags.
func (s *EtcdStore) Subscriptions(ctx context.Context, owner string) (*Registry, error) {
	reg := s.regPrefix()
	ranges := []string{reg + "sub/" + owner + ":", reg + "member/" + owner + ":", reg + "full/" + owner + ":"}
	ops := make([]clientv3.Op, len(ranges))
	for i, r := range ranges {
		ops[i] = clientv3.OpGet(r, clientv3.WithPrefix())
	}
	octx, cancel := bound(ctx, s.OpTimeout)
	tr, err := s.cli.Txn(octx).Then(ops...).Commit()
	cancel()
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "list the subscriptions of %s", owner)
	}
	recs := map[string]*SubscriptionRecord{}
	members := map[string][]string{}
	full := map[string]bool{}
	for i, r := range tr.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			rest := strings.TrimPrefix(string(kv.Key), ranges[i])
			switch i {
			case 0:
				rec := &SubscriptionRecord{}
				if err := proto.Unmarshal(kv.Value, rec); err != nil {
					s.logger.Warn("topics: skipping an unreadable subscription", "key", string(kv.Key), "err", err)
					continue
				}
				recs[owner+":"+rest] = rec
			case 1:
				if name, m, ok := strings.Cut(rest, "/"); ok {
					members[owner+":"+name] = append(members[owner+":"+name], m)
				}
			case 2:
				full[owner+":"+rest] = true
			}
		}
	}
	return NewRegistry(nil, recs, members, full), nil
}
