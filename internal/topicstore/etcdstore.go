package topicstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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
//	log/<owner>/<key>         a message published to one of the owner's
//	                          topics, once (a log record: its TopicEntry and
//	                          the subscriptions it was matched to)
//	cur/<owner>/<id>          a subscription's cursor in its owner's log
//	q/<id>/<key>              an entry a subscription holds apart from the log:
//	                          retried (with its delivery state), replayed, or
//	                          queued by the layout before the log (TopicEntry)
//	dead/<id>/<key>           a dead letter (DeadLetter)
//	idem/<scope>/<key>        an idempotency key, on a lease of the window
//
// A subscription's queue is the records of its owner's log past its cursor
// that name it, and its held entries, in log order: the records' etcd
// revision, then their keys (the keys one EtcdStore makes increase, so the
// records of one transaction keep the order in which they were given to
// Append). See etcdlog.go for the cursor.
//
// Publishes (Append) and cursors (Ack) are written with group commit (see
// etcdappend.go), in transactions shared with the other writes of its etcd
// client that arrive together.
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

	followMu  sync.Mutex
	followers map[string]*logFollower // the queues followed here, by subscription
	gcAt      map[string]time.Time    // each owner's log's last gc

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
		followers:  map[string]*logFollower{},
		gcAt:       map[string]time.Time{},
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
		return nil, errs.New(codes.Internal, "subscribe: %w", err)
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
				return nil, errs.New(codes.Internal, "subscription %s: unreadable: %w", rec.GetId(), err)
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
					clientv3.OpPut(s.verKey(p.Owner), ""),
					clientv3.OpPut(s.curKey(p.Owner, rec.GetId()), ""))
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
		owner := ""
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
						ops = append(ops, clientv3.OpPut(s.verKey(p.Owner), ""), clientv3.OpDelete(s.curKey(p.Owner, id)))
						owner = p.Owner
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
			if last && owner != "" {
				s.gcLog(ctx, owner, true)
			}
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
		f(newRegistry(vs, rs, ms, fs))
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
	return newRegistry(nil, recs, members, full), nil
}
