package topicstore

import (
	"context"
	"sort"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/etcdbatch"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Append implements Store with group commit (internal/etcdbatch): each
// item is one record of its owner's log (see etcdlog.go), written once
// whatever the number of subscriptions it was matched to, by a writer of
// the transactions its etcd client shares with the other publishes,
// cursors and A2A task writes that arrive together. An item's writer puts
// its record (and its idempotency key) in a nested transaction of its own,
// conditional on the version of its topic's owner (and on the key being
// new): an item whose owner's subscriptions changed is not queued (Append
// then returns a StaleError), while the others of the same Append are.
// An item matched to no subscription writes nothing but its key.
func (s *EtcdStore) Append(ctx context.Context, items []*Item, versions map[string]int64) error {
	lease, err := s.idemLease(ctx, items)
	if err != nil {
		return err
	}
	a := &appender{s: s, versions: versions, lease: lease, stale: map[string]int64{}}
	for o := range versions {
		a.owners = append(a.owners, o)
	}
	sort.Strings(a.owners)
	for _, it := range items {
		if it.Owner == "" {
			return errs.New(codes.InvalidArgument, "publish: an item without its topic's owner")
		}
		var val []byte
		if len(it.Subs) > 0 {
			if val, err = encodeRecord(it.Entry, it.Subs); err != nil {
				return err
			}
			if len(val) > s.MaxBytes/2 {
				return errs.New(codes.ResourceExhausted, "publish: a log record of %d bytes (the message and the %d subscriptions it matched) is over %d", len(val), len(it.Subs), s.MaxBytes/2)
			}
		}
		a.add(it, val)
	}
	if err := a.flush(ctx); err != nil {
		return err
	}
	if len(a.stale) > 0 {
		return &StaleError{Versions: a.stale}
	}
	return nil
}

// idemLease is the lease of the idempotency keys, if an item has one.
func (s *EtcdStore) idemLease(ctx context.Context, items []*Item) (clientv3.LeaseID, error) {
	for _, it := range items {
		if it.IdemKey != "" {
			return s.leaseFor(ctx)
		}
	}
	return 0, nil
}

// appender is one Append: the writers of its items waiting to be
// committed together, and the versions found stale.
type appender struct {
	s        *EtcdStore
	versions map[string]int64
	owners   []string // of versions, sorted
	lease    clientv3.LeaseID
	pending  []pendingItem
	stale    map[string]int64 // owner: its version now
}

type pendingItem struct {
	it     *Item
	owners []string
	w      *etcdbatch.Write
	// more are the items that share w with it: without idempotency keys,
	// conditional on the same owner's version, their records after its.
	more       []*Item
	ops, bytes int // of it and more
}

// add queues it for the next flush: in the writer of the item before it
// if both are conditional on the same owner's version alone and fit in one
// writer (one condition, and one nested transaction, for many publishes to
// the same owner's topics), else in a writer of its own.
func (a *appender) add(it *Item, val []byte) {
	owners := a.ownersOf(it)
	rec := a.record(it, val)
	if n := len(a.pending); n > 0 && it.IdemKey == "" && len(owners) == 1 {
		p := &a.pending[n-1]
		ops, bytes := p.ops+len(rec), p.bytes+len(val)+64
		if p.it.IdemKey == "" && len(p.owners) == 1 && p.owners[0] == owners[0] && ops <= a.s.MaxOps/2-1 && bytes <= a.s.MaxBytes/2 {
			p.w.Then = append(p.w.Then, rec...)
			p.more = append(p.more, it)
			p.ops, p.bytes = ops, bytes
			return
		}
	}
	w := a.conditional(it, owners)
	w.Then = append(w.Then, rec...)
	a.pending = append(a.pending, pendingItem{it: it, owners: owners, w: w, ops: len(rec), bytes: len(val) + 64})
}

// flush commits the items queued and settles them.
func (a *appender) flush(ctx context.Context) error {
	if len(a.pending) == 0 {
		return nil
	}
	ws := make([]*etcdbatch.Write, len(a.pending))
	for i, p := range a.pending {
		ws[i] = p.w
	}
	err := a.s.batch.Do(ctx, ws...)
	a.s.countTxns(ws)
	for _, p := range a.pending {
		if p.w.Err() == nil && a.settle(p) {
			p.it.Done = true
			for _, it := range p.more {
				it.Done = true
			}
		}
	}
	a.pending = nil
	if err != nil {
		return etcderr.FromCall(ctx, err, "publish")
	}
	return nil
}

// ownersOf is the owners whose versions it is conditional on: its own, or
// all of them if it does not say.
func (a *appender) ownersOf(it *Item) []string {
	if _, ok := a.versions[it.Owner]; ok {
		return []string{it.Owner}
	}
	return a.owners
}

// conditional is it's writer without its copies: if the versions of owners
// are the ones given and its idempotency key (if any) is new, the key is
// put; else the versions and the key are read (in that order).
func (a *appender) conditional(it *Item, owners []string) *etcdbatch.Write {
	s := a.s
	w := &etcdbatch.Write{}
	for _, o := range owners {
		w.If = append(w.If, clientv3.Compare(clientv3.ModRevision(s.verKey(o)), "=", a.versions[o]))
		w.Else = append(w.Else, clientv3.OpGet(s.verKey(o), clientv3.WithKeysOnly()))
	}
	if it.IdemKey != "" {
		ik := s.idemKey(it.IdemKey)
		w.If = append(w.If, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
		w.Then = append(w.Then, clientv3.OpPut(ik, it.Entry.GetMessage().GetId(), clientv3.WithLease(a.lease)))
		w.Else = append(w.Else, clientv3.OpGet(ik))
	}
	return w
}

// record puts val, it's log record, at the end of its owner's log (none if
// it matched no subscription).
func (a *appender) record(it *Item, val []byte) []clientv3.Op {
	if val == nil {
		return nil
	}
	return []clientv3.Op{clientv3.OpPut(a.s.logPrefix(it.Owner)+a.s.newKey(), string(val))}
}

// settle reads what p's committed writer found: true if it was written or
// is a duplicate (Duplicate set), false if its owner's version changed
// (noted in a.stale).
func (a *appender) settle(p pendingItem) bool {
	if p.w.Succeeded {
		return true
	}
	cur := make(map[string]int64, len(p.owners))
	stale := false
	for i, o := range p.owners {
		cur[o] = 0 // absent: no subscription left
		if kvs := p.w.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			cur[o] = kvs[0].ModRevision
		}
		stale = stale || cur[o] != a.versions[o]
	}
	if stale {
		for o, v := range cur {
			a.stale[o] = v
		}
		return false
	}
	if p.it.IdemKey == "" || len(p.w.Responses) <= len(p.owners) {
		return false // not written, and not for a key: cannot be
	}
	p.it.Duplicate = true
	if kvs := p.w.Responses[len(p.owners)].GetResponseRange().GetKvs(); len(kvs) > 0 {
		p.it.DuplicateOf = string(kvs[0].Value)
	}
	return true
}

// countTxns counts the transactions ws were committed in.
func (s *EtcdStore) countTxns(ws []*etcdbatch.Write) {
	var last int64
	for _, w := range ws {
		if w.Err() == nil && w.Revision != last {
			last = w.Revision
			s.txns.Add(1)
		}
	}
}

// Ack implements Store. A record of the log followed here is settled in
// memory, and the subscription's cursor written forward if every record
// below it is settled; a held entry (or a record of a queue not followed
// here) is deleted. The writes go in writers of up to 16 operations each,
// shared with what else is being written.
func (s *EtcdStore) Ack(ctx context.Context, acks []AckKey) error {
	const per = 16
	seen := make(map[AckKey]bool, len(acks))
	var ws []*etcdbatch.Write
	var w *etcdbatch.Write
	op := func(o clientv3.Op) {
		if w == nil || len(w.Then) == per {
			w = &etcdbatch.Write{}
			ws = append(ws, w)
		}
		w.Then = append(w.Then, o)
	}
	moved := map[*logFollower]bool{}
	for _, a := range acks {
		if seen[a] { // etcd refuses a key twice in one transaction
			continue
		}
		seen[a] = true
		if l := s.follower(a.Sub); l != nil && l.settle(a.Key, false) {
			moved[l] = true
			continue
		}
		op(clientv3.OpDelete(s.queuePrefix(a.Sub) + a.Key))
	}
	type wrote struct {
		l *logFollower
		c int64
	}
	var curs []wrote
	for l := range moved {
		if c, ok := l.cursor(); ok {
			op(clientv3.OpPut(s.curKey(l.owner, l.id), strconv.FormatInt(c, 10)))
			curs = append(curs, wrote{l, c})
		}
	}
	if len(ws) == 0 {
		return nil
	}
	err := s.batch.Do(ctx, ws...)
	s.countTxns(ws)
	if err != nil {
		return etcderr.FromCall(ctx, err, "acknowledge")
	}
	owners := map[string]bool{}
	for _, c := range curs {
		c.l.wrote(c.c)
		owners[c.l.owner] = true
	}
	for o := range owners {
		s.gcLog(ctx, o, false)
	}
	return nil
}

// leaseFor returns a lease that keeps an idempotency key for at least the
// window: one lease of 1.1 windows serves the keys of a tenth of a window.
func (s *EtcdStore) leaseFor(ctx context.Context) (clientv3.LeaseID, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.lease != 0 && time.Since(s.leaseAt) < s.Window/10 {
		return s.lease, nil
	}
	octx, cancel := bound(ctx, s.OpTimeout)
	defer cancel()
	ttl := int64((s.Window + s.Window/10 + time.Second - 1) / time.Second)
	l, err := s.cli.Grant(octx, ttl)
	if err != nil {
		return 0, etcderr.FromCall(ctx, err, "topics: grant the idempotency lease")
	}
	s.lease, s.leaseAt = l.ID, time.Now()
	return l.ID, nil
}
