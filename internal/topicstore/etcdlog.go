package topicstore

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/internal/etcdbatch"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// A subscription on etcd is a cursor in the log of its pattern's owner
// (log/<owner>/, one record per message published, naming the
// subscriptions it was matched to) plus the entries it holds apart
// (q/<id>/: retried, replayed, or queued by the layout before the log):
//
//	cur/<owner>/<id>   the cursor: every record of the log at or below this
//	                   etcd revision is settled for the subscription
//	                   (acknowledged, held apart, or a dead letter); empty,
//	                   the key's own CreateRevision (the subscription's
//	                   creation)
//
// The silo that delivers a subscription follows its queue (FollowQueue): the
// records past the cursor that name it, and its held entries. It settles
// them in memory and writes the cursor forward with its acknowledgements
// (Ack), once every record below is settled: an acknowledgement costs no
// write of its own. Records go (gc) once every cursor of their owner's
// subscriptions passed them. After a crash, what was acknowledged past the
// last cursor written is delivered again: at least once.

// logFollower is the state of one subscription whose queue this store
// follows: the records past its cursor, in log order, and which are
// settled. mu guards it; Ack, Update and Kill settle records through it.
type logFollower struct {
	id, owner string

	mu      sync.Mutex
	order   []string         // record keys past the cursor naming id, in log order
	pos     map[string]int64 // of those, each one's revision
	settled map[string]bool  // of those, the settled ones; kept across reloads
	held    map[string]bool  // of those, the ones held apart (in q/) since
	gone    []string         // settled, not held: their removal to hand out
	wake    chan struct{}    // gone has keys
	seen    int64            // the last revision of the log read
	written int64            // the cursor as stored
}

func newLogFollower(id, owner string) *logFollower {
	return &logFollower{id: id, owner: owner, pos: map[string]int64{}, settled: map[string]bool{}, held: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// open reports whether key is an unsettled record of the follower's.
func (l *logFollower) open(key string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pos[key]
	return p, ok && !l.settled[key]
}

// settle marks key settled (held: as held apart); false if it is not one
// of its records, or one held apart (whose held entry is then the one to
// remove).
func (l *logFollower) settle(key string, held bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pos[key]; !ok || l.held[key] {
		return false
	}
	l.settled[key] = true
	if held {
		l.held[key] = true
	} else {
		l.gone = append(l.gone, key)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// takeGone returns the keys settled since the last call, to remove.
func (l *logFollower) takeGone() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gone
	l.gone = nil
	return g
}

// cursor returns the cursor the settled records allow, and whether it is
// past the one stored; it forgets the records below it.
func (l *logFollower) cursor() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	var last int64 // the revision of the last settled record forgotten
	for i < len(l.order) && l.settled[l.order[i]] {
		last = max(last, l.pos[l.order[i]])
		delete(l.pos, l.order[i])
		delete(l.settled, l.order[i])
		delete(l.held, l.order[i])
		i++
	}
	l.order = l.order[i:]
	// Every record settled: the log read so far, and at least the records
	// settled (delivered before seen was moved past them).
	c := max(l.seen, last)
	if len(l.order) > 0 {
		c = l.pos[l.order[0]] - 1
	}
	return c, c > l.written
}

func (l *logFollower) wrote(c int64) {
	l.mu.Lock()
	l.written = max(l.written, c)
	l.mu.Unlock()
}

func (s *EtcdStore) logPrefix(owner string) string  { return s.root + "log/" + owner + "/" }
func (s *EtcdStore) curKey(owner, id string) string { return s.root + "cur/" + owner + "/" + id }
func (s *EtcdStore) curPrefix(owner string) string  { return s.root + "cur/" + owner + "/" }

// follower returns the follower of subscription id in this store, if any.
func (s *EtcdStore) follower(id string) *logFollower {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	return s.followers[id]
}

// FollowQueue implements Store: the records of the log of the pattern's
// owner past the subscription's cursor that name it, and its held
// entries, merged in log order.
func (s *EtcdStore) FollowQueue(ctx context.Context, id string, f func(QueueEvent)) {
	var l *logFollower
	defer func() {
		s.followMu.Lock()
		if l != nil && s.followers[id] == l {
			delete(s.followers, id)
		}
		s.followMu.Unlock()
	}()
	b := retry.New(100*time.Millisecond, 5*time.Second, nil)
	for ctx.Err() == nil {
		st, err := s.loadQueue(ctx, id, l)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("topics: loading a queue from etcd failed; retrying", "subscription", id, "err", etcderr.Wrap(err))
			if !b.Wait(ctx, nil) {
				return
			}
			continue
		}
		b.Reset()
		if st.follower != l {
			l = st.follower
			s.followMu.Lock()
			if l == nil {
				delete(s.followers, id)
			} else {
				s.followers[id] = l
			}
			s.followMu.Unlock()
		}
		f(QueueEvent{Reset: true})
		for _, ev := range st.events {
			f(ev)
		}
		if s.testHookLoaded != nil {
			s.testHookLoaded()
		}
		err = s.watchQueue(ctx, id, st, f)
		if errors.Is(err, errCompacted) || errors.Is(err, errReload) || ctx.Err() != nil {
			continue
		}
		s.logger.Warn("topics: watching a queue in etcd failed; reading it again", "subscription", id, "err", etcderr.Wrap(err))
		if !b.Wait(ctx, nil) {
			return
		}
	}
}

// errReload: the subscription's cursor came or went; read its queue again.
var errReload = errors.New("topics: the subscription changed")

// queueState is a queue as loadQueue read it.
type queueState struct {
	follower *logFollower // nil: the subscription does not exist
	rev      int64        // the revision it was read at
	events   []QueueEvent // its entries, in order
}

// loadQueue reads subscription id's queue at one revision: its cursor
// (created if the subscription has none: one of the layout before the log,
// whose queue is all held entries), the log past it, its held entries. The
// records prev (the follower before a reload) settled stay settled.
func (s *EtcdStore) loadQueue(ctx context.Context, id string, prev *logFollower) (*queueState, error) {
	octx, cancel := bound(ctx, s.OpTimeout)
	resp, err := s.cli.Get(octx, s.subKey(id))
	cancel()
	if err != nil {
		return nil, err
	}
	st := &queueState{rev: resp.Header.Revision}
	owner := ""
	if len(resp.Kvs) > 0 {
		rec := &SubscriptionRecord{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, rec); err == nil {
			if p, err := ParsePattern(rec.GetPattern(), ""); err == nil {
				owner = p.Owner
			}
		}
	}
	var cur int64
	if owner != "" {
		if err := s.ensureCursor(ctx, id, owner); err != nil {
			return nil, err
		}
		octx, cancel := bound(ctx, s.OpTimeout)
		tr, err := s.cli.Txn(octx).Then(clientv3.OpGet(s.curKey(owner, id)), clientv3.OpGet(s.subKey(id), clientv3.WithKeysOnly())).Commit()
		cancel()
		if err != nil {
			return nil, err
		}
		st.rev = tr.Header.Revision
		kvs := tr.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 || len(tr.Responses[1].GetResponseRange().GetKvs()) == 0 {
			owner = "" // gone meanwhile
		} else {
			cur = cursorOf(kvs[0])
		}
	}
	held, _, err := s.loadAt(ctx, s.queuePrefix(id), st.rev, 0)
	if err != nil {
		return nil, err
	}
	type ordered struct {
		pos int64
		key string
		ev  QueueEvent
	}
	var all []ordered
	heldKeys := make(map[string]bool, len(held))
	for _, kv := range held {
		k := strings.TrimPrefix(string(kv.Key), s.queuePrefix(id))
		e, err := decodeEntry(kv.Value)
		if err != nil {
			s.logger.Warn("topics: skipping an unreadable queued message", "key", string(kv.Key), "err", err)
			continue
		}
		heldKeys[k] = true
		pos := heldPos(kv.Value)
		if pos == 0 {
			pos = kv.CreateRevision
		}
		all = append(all, ordered{pos, k, QueueEvent{Key: k, Entry: e}})
	}
	if owner != "" {
		l := newLogFollower(id, owner)
		l.written, l.seen = cur, max(cur, st.rev)
		if prev != nil && prev.owner == owner {
			prev.mu.Lock()
			for k := range prev.settled {
				l.settled[k] = true
			}
			for k := range prev.held {
				l.held[k] = true
			}
			prev.mu.Unlock()
		}
		recs, _, err := s.loadAt(ctx, s.logPrefix(owner), st.rev, cur+1)
		if err != nil {
			return nil, err
		}
		sort.SliceStable(recs, func(i, j int) bool {
			if recs[i].ModRevision != recs[j].ModRevision {
				return recs[i].ModRevision < recs[j].ModRevision
			}
			return string(recs[i].Key) < string(recs[j].Key)
		})
		for _, kv := range recs {
			if !recordNames(kv.Value, id) {
				continue
			}
			k := strings.TrimPrefix(string(kv.Key), s.logPrefix(owner))
			l.order = append(l.order, k)
			l.pos[k] = kv.ModRevision
			if heldKeys[k] {
				l.settled[k], l.held[k] = true, true // held apart: its held entry is the one
			}
			if l.settled[k] {
				continue
			}
			e, err := decodeEntry(kv.Value)
			if err != nil {
				s.logger.Warn("topics: skipping an unreadable log record", "key", string(kv.Key), "err", err)
				l.settled[k] = true
				continue
			}
			all = append(all, ordered{kv.ModRevision, k, QueueEvent{Key: k, Entry: e}})
		}
		for k := range l.settled {
			if _, ok := l.pos[k]; !ok {
				delete(l.settled, k)
			}
		}
		for k := range l.held {
			if _, ok := l.pos[k]; !ok {
				delete(l.held, k)
			}
		}
		st.follower = l
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].pos != all[j].pos {
			return all[i].pos < all[j].pos
		}
		return all[i].key < all[j].key
	})
	st.events = make([]QueueEvent, len(all))
	for i, o := range all {
		st.events[i] = o.ev
	}
	return st, nil
}

// cursorOf reads a cursor's key.
func cursorOf(kv *mvccpb.KeyValue) int64 {
	if c, err := strconv.ParseInt(string(kv.Value), 10, 64); err == nil {
		return c
	}
	return kv.CreateRevision
}

// ensureCursor gives subscription id a cursor if it exists and has none:
// a subscription of the layout before the log gets one at the present, its
// queue so far being its held entries.
func (s *EtcdStore) ensureCursor(ctx context.Context, id, owner string) error {
	ck := s.curKey(owner, id)
	octx, cancel := bound(ctx, s.OpTimeout)
	defer cancel()
	_, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(s.subKey(id)), ">", 0)).
		Then(clientv3.OpPut(ck, "")).Commit()
	return err
}

// loadAt reads every key under prefix at revision rev (0: now), in pages,
// with a ModRevision of at least minMod (0: any).
func (s *EtcdStore) loadAt(ctx context.Context, prefix string, rev, minMod int64) ([]*mvccpb.KeyValue, int64, error) {
	var (
		out []*mvccpb.KeyValue
		key = prefix
		end = clientv3.GetPrefixRangeEnd(prefix)
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if minMod > 0 {
			opts = append(opts, clientv3.WithMinModRev(minMod))
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

// watchQueue follows st's subscription from the revision after st.rev:
// its held entries, its cursor (a deletion or a creation reads the queue
// again) and the records of its owner's log.
func (s *EtcdStore) watchQueue(ctx context.Context, id string, st *queueState, f func(QueueEvent)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	from := clientv3.WithRev(st.rev + 1)
	qp := s.queuePrefix(id)
	held := s.cli.Watch(wctx, qp, clientv3.WithPrefix(), from)
	var logs, curs clientv3.WatchChan
	var lp string
	var wake chan struct{}
	l := st.follower
	if l != nil {
		wake = l.wake
		lp = s.logPrefix(l.owner)
		logs = s.cli.Watch(wctx, lp, clientv3.WithPrefix(), from)
		curs = s.cli.Watch(wctx, s.curKey(l.owner, id), from)
	} else {
		// No subscription: its creation is its registry key's.
		curs = s.cli.Watch(wctx, s.subKey(id), from)
	}
	check := func(resp clientv3.WatchResponse, ok bool) error {
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("topics: watch closed")
		}
		if resp.CompactRevision != 0 {
			return errCompacted
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return errCompacted
			}
			return err
		}
		return nil
	}
	for {
		select {
		case <-wake:
			for _, k := range l.takeGone() {
				f(QueueEvent{Key: k})
			}
		case resp, ok := <-held:
			if err := check(resp, ok); err != nil {
				return err
			}
			for _, ev := range resp.Events {
				k := strings.TrimPrefix(string(ev.Kv.Key), qp)
				if ev.Type == mvccpb.DELETE {
					f(QueueEvent{Key: k})
				} else if e, err := decodeEntry(ev.Kv.Value); err != nil {
					s.logger.Warn("topics: skipping an unreadable queued message", "key", string(ev.Kv.Key), "err", err)
				} else {
					f(QueueEvent{Key: k, Entry: e, New: ev.IsCreate()})
				}
			}
		case resp, ok := <-logs:
			if err := check(resp, ok); err != nil {
				return err
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE || !recordNames(ev.Kv.Value, id) {
					continue // gone below every cursor; or not its own
				}
				k := strings.TrimPrefix(string(ev.Kv.Key), lp)
				e, err := decodeEntry(ev.Kv.Value)
				l.mu.Lock()
				if _, dup := l.pos[k]; !dup {
					l.order = append(l.order, k)
					l.pos[k] = ev.Kv.ModRevision
					if err != nil {
						l.settled[k] = true
					}
				}
				l.mu.Unlock()
				if err != nil {
					s.logger.Warn("topics: skipping an unreadable log record", "key", string(ev.Kv.Key), "err", err)
					continue
				}
				f(QueueEvent{Key: k, Entry: e, New: true})
			}
			if n := len(resp.Events); n > 0 {
				l.mu.Lock()
				l.seen = max(l.seen, resp.Events[n-1].Kv.ModRevision)
				l.mu.Unlock()
			}
		case resp, ok := <-curs:
			if err := check(resp, ok); err != nil {
				return err
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE || ev.IsCreate() {
					return errReload
				}
			}
		}
	}
}

// gcLog deletes the records of owner's log that every cursor of its
// subscriptions passed (all of them if it has none left), at most every
// gcEvery per owner.
func (s *EtcdStore) gcLog(ctx context.Context, owner string, force bool) {
	s.followMu.Lock()
	if last, ok := s.gcAt[owner]; !force && ok && time.Since(last) < gcEvery {
		s.followMu.Unlock()
		return
	}
	s.gcAt[owner] = time.Now()
	s.followMu.Unlock()
	octx, cancel := bound(ctx, s.OpTimeout)
	resp, err := s.cli.Get(octx, s.curPrefix(owner), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return
	}
	upTo := resp.Header.Revision
	for _, kv := range resp.Kvs {
		upTo = min(upTo, cursorOf(kv))
	}
	for {
		octx, cancel := bound(ctx, s.OpTimeout)
		recs, err := s.cli.Get(octx, s.logPrefix(owner), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithMaxModRev(upTo), clientv3.WithLimit(int64(s.MaxOps)))
		cancel()
		if err != nil || len(recs.Kvs) == 0 {
			return
		}
		ops := make([]clientv3.Op, len(recs.Kvs))
		for i, kv := range recs.Kvs {
			ops[i] = clientv3.OpDelete(string(kv.Key))
		}
		octx, cancel = bound(ctx, s.OpTimeout)
		_, err = s.cli.Txn(octx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return
		}
		s.txns.Add(1)
		if !recs.More {
			return
		}
	}
}

// gcEvery is how often at most a store deletes the records of one owner's
// log that every subscription passed.
const gcEvery = time.Second

// advance writes l's cursor if the records settled allow it further (a
// failure leaves it to the next acknowledgement).
func (s *EtcdStore) advance(ctx context.Context, l *logFollower) {
	c, ok := l.cursor()
	if !ok {
		return
	}
	w := &etcdbatch.Write{Then: []clientv3.Op{clientv3.OpPut(s.curKey(l.owner, l.id), strconv.FormatInt(c, 10))}}
	if err := s.batch.Do(ctx, w); err == nil {
		s.countTxns([]*etcdbatch.Write{w})
		l.wrote(c)
	}
}
