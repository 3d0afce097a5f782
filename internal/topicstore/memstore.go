package topicstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// Memory is a Store in memory: the default of a topics.Service that no
// silo wired, and the twin of the durable stores in tests. Nothing survives
// the process.
// The zero value is not usable; use NewMemory.
type Memory struct {
	clk    clock.Clock
	window time.Duration

	mu       sync.Mutex
	seq      uint64
	versions map[string]int64
	subs     map[string]*SubscriptionRecord
	members  map[string]map[string]bool
	full     map[string]bool
	queues   map[string]*memQueue
	dead     map[string]map[string]*DeadLetter
	idem     map[string]memIdem
	changed  chan struct{} // closed and replaced when the registry changes
	appends  int           // Append calls that queued something, for tests
}

type memQueue struct {
	keys      []string // in order; a removed key is dropped
	entries   map[string]*Entry
	followers map[*memFollower]struct{}
}

type memFollower struct {
	mu     sync.Mutex
	events []QueueEvent
	wake   chan struct{}
}

type memIdem struct {
	id string
	at time.Time
}

// newMemStore returns an empty store whose idempotency keys last window
// on clk (nil: the real clock; 0: 10 minutes).
func newMemStore(clk clock.Clock, window time.Duration) *Memory {
	if clk == nil {
		clk = clock.Real{}
	}
	if window <= 0 {
		window = DefaultIdemWindow
	}
	return &Memory{
		clk:      clk,
		window:   window,
		versions: map[string]int64{},
		subs:     map[string]*SubscriptionRecord{},
		members:  map[string]map[string]bool{},
		full:     map[string]bool{},
		queues:   map[string]*memQueue{},
		dead:     map[string]map[string]*DeadLetter{},
		idem:     map[string]memIdem{},
		changed:  make(chan struct{}),
	}
}

var _ Store = (*Memory)(nil)

func (s *Memory) nextKey() string {
	s.seq++
	return fmt.Sprintf("%020d", s.seq)
}

func (s *Memory) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Memory) queue(id string) *memQueue {
	q := s.queues[id]
	if q == nil {
		q = &memQueue{entries: map[string]*Entry{}, followers: map[*memFollower]struct{}{}}
		s.queues[id] = q
	}
	return q
}

func (q *memQueue) emit(ev QueueEvent) {
	for f := range q.followers {
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// Subscribe implements Store.
func (s *Memory) Subscribe(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	p, err := ParsePattern(rec.GetPattern(), "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.subs[rec.GetId()]
	if cur != nil && cur.GetPattern() != rec.GetPattern() {
		return nil, errs.New(codes.FailedPrecondition, "subscription %s exists with pattern %s, not %s", rec.GetId(), cur.GetPattern(), rec.GetPattern())
	}
	if cur == nil {
		cur = proto.Clone(rec).(*SubscriptionRecord)
		s.subs[rec.GetId()] = cur
		s.seq++
		s.versions[p.Owner] = int64(s.seq)
		s.members[rec.GetId()] = map[string]bool{}
	}
	s.members[rec.GetId()][member] = true
	s.notifyLocked()
	return proto.Clone(cur).(*SubscriptionRecord), nil
}

// Unsubscribe implements Store.
func (s *Memory) Unsubscribe(ctx context.Context, id, member string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.members[id]
	if !ms[member] {
		return false, errs.New(codes.NotFound, "%s is not subscribed to %s", member, id)
	}
	delete(ms, member)
	deleted := len(ms) == 0
	if deleted {
		s.deleteLocked(id)
	}
	s.notifyLocked()
	return deleted, nil
}

// deleteLocked deletes subscription id with its queue and dead letters.
func (s *Memory) deleteLocked(id string) {
	if p, err := ParsePattern(s.subs[id].GetPattern(), ""); err == nil {
		s.seq++
		s.versions[p.Owner] = int64(s.seq)
	}
	delete(s.subs, id)
	delete(s.members, id)
	delete(s.full, id)
	delete(s.dead, id)
	if q := s.queues[id]; q != nil {
		for _, k := range q.keys {
			q.emit(QueueEvent{Key: k})
		}
		q.keys, q.entries = nil, map[string]*Entry{}
	}
}

// SubscribeSession implements Store: in one process, it is Subscribe.
func (s *Memory) SubscribeSession(ctx context.Context, rec *SubscriptionRecord, member string) (*SubscriptionRecord, error) {
	return s.Subscribe(ctx, rec, member)
}

// Prune implements Store.
func (s *Memory) Prune(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[id]; !ok || len(s.members[id]) > 0 {
		return false, nil
	}
	s.deleteLocked(id)
	s.notifyLocked()
	return true, nil
}

// Expire removes member from every subscription, as the end of an etcd
// lease does a session's: for tests of Prune.
func (s *Memory) Expire(member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ms := range s.members {
		delete(ms, member)
	}
	s.notifyLocked()
}

// Subscriptions implements Store.
func (s *Memory) Subscriptions(ctx context.Context, owner string) (*Registry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.registryLocked()
	for id := range r.Subs {
		if o, _, _ := strings.Cut(id, ":"); o != owner {
			delete(r.Subs, id)
		}
	}
	return newRegistry(r.Versions, recsOf(r), membersOf(r), fullOf(r)), nil
}

func recsOf(r *Registry) map[string]*SubscriptionRecord {
	out := make(map[string]*SubscriptionRecord, len(r.Subs))
	for id, s := range r.Subs {
		out[id] = s.Record
	}
	return out
}

func membersOf(r *Registry) map[string][]string {
	out := make(map[string][]string, len(r.Subs))
	for id, s := range r.Subs {
		out[id] = s.Members
	}
	return out
}

func fullOf(r *Registry) map[string]bool {
	out := make(map[string]bool, len(r.Subs))
	for id, s := range r.Subs {
		out[id] = s.Full
	}
	return out
}

func (s *Memory) registryLocked() *Registry {
	versions := make(map[string]int64, len(s.versions))
	for k, v := range s.versions {
		versions[k] = v
	}
	recs := make(map[string]*SubscriptionRecord, len(s.subs))
	members := make(map[string][]string, len(s.members))
	full := make(map[string]bool, len(s.full))
	for id, r := range s.subs {
		recs[id] = proto.Clone(r).(*SubscriptionRecord)
		for m := range s.members[id] {
			members[id] = append(members[id], m)
		}
		full[id] = s.full[id]
	}
	return newRegistry(versions, recs, members, full)
}

// FollowRegistry implements Store.
func (s *Memory) FollowRegistry(ctx context.Context, f func(*Registry)) {
	for {
		s.mu.Lock()
		r, ch := s.registryLocked(), s.changed
		s.mu.Unlock()
		f(r)
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// Append implements Store.
func (s *Memory) Append(ctx context.Context, items []*Item, versions map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return errs.Wrap(errs.Code(err), err, "append")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for o, v := range versions {
		if s.versions[o] != v {
			cur := make(map[string]int64, len(versions))
			for o := range versions {
				cur[o] = s.versions[o]
			}
			return &StaleError{Versions: cur}
		}
	}
	now := s.clk.Now()
	for k, r := range s.idem {
		if now.Sub(r.at) >= s.window {
			delete(s.idem, k)
		}
	}
	queued := false
	for _, it := range items {
		it.Done = true
		if it.IdemKey != "" {
			if r, ok := s.idem[it.IdemKey]; ok {
				it.Duplicate, it.DuplicateOf = true, r.id
				continue
			}
			s.idem[it.IdemKey] = memIdem{id: it.Entry.GetMessage().GetId(), at: now}
		}
		for _, id := range it.Subs {
			if _, ok := s.subs[id]; !ok {
				continue
			}
			q := s.queue(id)
			k := s.nextKey()
			e := proto.Clone(it.Entry).(*Entry)
			q.keys = append(q.keys, k)
			q.entries[k] = e
			q.emit(QueueEvent{Key: k, Entry: proto.Clone(e).(*Entry), New: true})
			queued = true
		}
	}
	if queued {
		s.appends++
	}
	return nil
}

// FollowQueue implements Store.
func (s *Memory) FollowQueue(ctx context.Context, id string, f func(QueueEvent)) {
	fl := &memFollower{wake: make(chan struct{}, 1)}
	s.mu.Lock()
	q := s.queue(id)
	fl.events = append(fl.events, QueueEvent{Reset: true})
	for _, k := range q.keys {
		fl.events = append(fl.events, QueueEvent{Key: k, Entry: proto.Clone(q.entries[k]).(*Entry)})
	}
	q.followers[fl] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(q.followers, fl)
		s.mu.Unlock()
	}()
	// An Append between the registration and here may have woken it
	// already: wake is a one-slot flag, never a blocking send.
	select {
	case fl.wake <- struct{}{}:
	default:
	}
	for {
		select {
		case <-fl.wake:
		case <-ctx.Done():
			return
		}
		fl.mu.Lock()
		evs := fl.events
		fl.events = nil
		fl.mu.Unlock()
		for _, ev := range evs {
			f(ev)
		}
	}
}

func (q *memQueue) remove(k string) (*Entry, bool) {
	e, ok := q.entries[k]
	if !ok {
		return nil, false
	}
	delete(q.entries, k)
	for i, x := range q.keys {
		if x == k {
			q.keys = append(q.keys[:i], q.keys[i+1:]...)
			break
		}
	}
	q.emit(QueueEvent{Key: k})
	return e, true
}

// Ack implements Store.
func (s *Memory) Ack(ctx context.Context, acks []AckKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range acks {
		s.queue(a.Sub).remove(a.Key)
	}
	return nil
}

// Update implements Store.
func (s *Memory) Update(ctx context.Context, id, key string, e *Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(id)
	if _, ok := q.entries[key]; !ok {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	q.entries[key] = proto.Clone(e).(*Entry)
	q.emit(QueueEvent{Key: key, Entry: proto.Clone(e).(*Entry)})
	return nil
}

// Kill implements Store.
func (s *Memory) Kill(ctx context.Context, id, key string, d *DeadLetter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.queue(id).remove(key); !ok {
		return errs.New(codes.NotFound, "%s: no queued entry %s", id, key)
	}
	if s.dead[id] == nil {
		s.dead[id] = map[string]*DeadLetter{}
	}
	d = proto.Clone(d).(*DeadLetter)
	d.Id = key
	s.dead[id][key] = d
	return nil
}

// SetFull implements Store.
func (s *Memory) SetFull(ctx context.Context, id string, full bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[id]; !ok {
		return nil
	}
	if s.full[id] != full {
		s.full[id] = full
		s.notifyLocked()
	}
	return nil
}

func (s *Memory) deadKeys(id string) []string {
	keys := make([]string, 0, len(s.dead[id]))
	for k := range s.dead[id] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DeadLetters implements Store.
func (s *Memory) DeadLetters(ctx context.Context, id, after string, limit int) ([]*DeadLetter, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*DeadLetter
	for _, k := range s.deadKeys(id) {
		if k <= after {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, proto.Clone(s.dead[id][k]).(*DeadLetter))
	}
	return out, false, nil
}

// Replay implements Store.
func (s *Memory) Replay(ctx context.Context, id string, keys []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if keys == nil {
		keys = s.deadKeys(id)
	}
	n := 0
	for _, k := range keys {
		d, ok := s.dead[id][k]
		if !ok {
			continue
		}
		delete(s.dead[id], k)
		q := s.queue(id)
		nk := s.nextKey()
		e := &Entry{Message: d.GetMessage()}
		q.keys = append(q.keys, nk)
		q.entries[nk] = e
		q.emit(QueueEvent{Key: nk, Entry: proto.Clone(e).(*Entry), New: true})
		n++
	}
	return n, nil
}

// Drop implements Store.
func (s *Memory) Drop(ctx context.Context, id string, keys []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if keys == nil {
		keys = s.deadKeys(id)
	}
	n := 0
	for _, k := range keys {
		if _, ok := s.dead[id][k]; ok {
			delete(s.dead[id], k)
			n++
		}
	}
	return n, nil
}
