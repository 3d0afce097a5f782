package topics

import (
	"context"
	"errors"
	"sync"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// engine delivers one subscription's queue, on the silo that owns it.
//
// It follows the queue (Store.FollowQueue) into lanes, one per publisher
// (the message's from), each in queue order. A lane's head is delivered,
// to one of the subscription's members in turn, when the previous one is
// settled and its not-before time has come; up to MaxInflight lanes
// deliver at once. Settling a delivery:
//
//	acknowledged (nil)   the entry leaves the lane; its key is removed from
//	                     the store in a batch, with other subscriptions'
//	                     (Service.acker)
//	Retry, other errors  attempts+1, written to the store with the
//	                     not-before time (Retry's, else the backoff); at
//	                     MaxAttempts, a dead letter
//	Unavailable          (the agent's silo is unreachable, or the handler
//	                     said so) retried after the backoff, in memory,
//	                     without counting an attempt
//	Poison               a dead letter
//
// So a publisher's messages reach a subscription in the order published,
// one at a time; a restart or a move of the subscription to another silo
// delivers again what was not acknowledged yet (at least once). The
// engine marks the backlog full in the store past MaxBacklog (publishers
// wait), and not full again under three quarters of it.
//
// mu guards everything below it; deliveries run on goroutines of their
// own and settle under mu.
type engine struct {
	s   *Service
	id  string
	ctx context.Context // ends the following and the dispatching (stop)
	// dctx bounds deliveries in flight: only abort ends it early.
	dctx    context.Context
	cancel  context.CancelFunc
	dcancel context.CancelFunc
	wake    chan struct{} // the dispatcher: something may be ready
	ackWake chan struct{} // the flagger: the full flag to write
	wg      sync.WaitGroup

	mu    sync.Mutex
	sub   *topicstore.Sub
	items map[string]*item
	lanes map[string]*lane
	// removed holds the keys this engine settled (acknowledged, or made
	// dead letters) whose deletion it has not seen from the store yet: a
	// late event of an earlier change of such a key (a retry's Update
	// arriving after the ack) must not queue it again.
	removed  map[string]struct{}
	n        int // entries queued
	inflight int
	rr       int // the member to deliver to next
	wantFull bool
	isFull   bool // as last written (or read from the registry)
}

// item is one queued entry.
type item struct {
	key  string
	e    *topicstore.Entry
	lane *lane
	busy bool   // a delivery is in flight
	gone bool   // removed from the lane while in flight
	dead string // a dead letter's reason, while writing it failed
	last string // the last error, for a dead letter written again
	// unavailable counts deliveries in a row that failed with Unavailable
	// (the agent's silo unreachable): they are retried with backoff but
	// not counted as attempts.
	unavailable int
}

type lane struct {
	from string
	q    []*item
}

func newEngine(s *Service, id string, sub *topicstore.Sub) *engine {
	e := &engine{
		s:       s,
		id:      id,
		sub:     sub,
		items:   map[string]*item{},
		lanes:   map[string]*lane{},
		removed: map[string]struct{}{},
		wake:    make(chan struct{}, 1),
		ackWake: make(chan struct{}, 1),
		isFull:  sub.Full,
	}
	e.ctx, e.cancel = context.WithCancel(s.ctx)
	e.dctx, e.dcancel = context.WithCancel(context.Background())
	return e
}

func (e *engine) start() {
	e.wg.Add(3)
	go func() {
		defer e.wg.Done()
		e.s.cfg.store.FollowQueue(e.ctx, e.id, e.onEvent)
	}()
	go e.dispatcher()
	go e.flagger()
}

// stop ends the following and the dispatching; wait waits for the
// deliveries in flight and the last acknowledgments.
func (e *engine) stop() { e.cancel() }

func (e *engine) wait() {
	e.wg.Wait()
	e.dcancel()
}

// abort cuts the deliveries in flight short.
func (e *engine) abort() {
	e.cancel()
	e.dcancel()
}

func (e *engine) setSub(sub *topicstore.Sub) {
	e.mu.Lock()
	e.sub = sub
	e.mu.Unlock()
	poke(e.wake)
}

// counts returns the entries queued and, of them, those being delivered.
func (e *engine) counts() (queued, inflight int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.inflight
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// onEvent applies a change of the queue.
func (e *engine) onEvent(ev topicstore.QueueEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case ev.Reset:
		for _, it := range e.items {
			it.gone = true
		}
		e.items, e.lanes, e.n = map[string]*item{}, map[string]*lane{}, 0
		e.removed = map[string]struct{}{}
	case ev.Entry == nil:
		delete(e.removed, ev.Key)
		if it := e.items[ev.Key]; it != nil {
			e.removeLocked(it)
		}
	default:
		it := e.items[ev.Key]
		if _, settled := e.removed[ev.Key]; it == nil && settled {
			break
		}
		if it == nil {
			from := ev.Entry.GetMessage().GetFrom()
			l := e.lanes[from]
			if l == nil {
				l = &lane{from: from}
				e.lanes[from] = l
			}
			it = &item{key: ev.Key, e: ev.Entry, lane: l}
			l.q = append(l.q, it)
			e.items[ev.Key] = it
			e.n++
		} else if !it.busy {
			it.e = ev.Entry
		}
	}
	e.checkFullLocked()
	poke(e.wake)
}

// settleLocked removes it, settled here, and remembers its key until the
// store's deletion of it shows.
func (e *engine) settleLocked(it *item) {
	if e.items[it.key] == it {
		e.removed[it.key] = struct{}{}
	}
	e.removeLocked(it)
}

// removeLocked takes it out of its lane and the queue.
func (e *engine) removeLocked(it *item) {
	if e.items[it.key] != it {
		return
	}
	delete(e.items, it.key)
	e.n--
	it.gone = true
	l := it.lane
	for i, x := range l.q {
		if x == it {
			l.q = append(l.q[:i], l.q[i+1:]...)
			break
		}
	}
	if len(l.q) == 0 {
		delete(e.lanes, l.from)
	}
}

func (e *engine) checkFullLocked() {
	max := e.s.cfg.MaxBacklog
	switch {
	case !e.wantFull && e.n >= max:
		e.wantFull = true
	case e.wantFull && e.n <= max*3/4:
		e.wantFull = false
	default:
		if e.wantFull == e.isFull {
			return
		}
	}
	poke(e.ackWake)
}

// dispatcher starts the deliveries that are due, and sleeps until the next
// one is, or something changes.
func (e *engine) dispatcher() {
	defer e.wg.Done()
	clk := e.s.cfg.clk
	t := clk.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.wake:
		case <-t.C():
		}
		if next := e.dispatch(); !next.IsZero() {
			t.Reset(max(next.Sub(clk.Now()), 0))
		}
	}
}

// dispatch starts what is due and returns when the next not-before time
// comes (zero if none waits). What is due goes to the members in turn, in
// batches of up to MaxDeliveryBatch (each lane's part of a batch its
// first entries, in order), except to client sessions, one at a time.
func (e *engine) dispatch() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil || len(e.sub.Members) == 0 {
		return time.Time{}
	}
	now := e.s.cfg.clk.Now()
	var next time.Time
	due := func(it *item) bool {
		if nb := it.e.GetNotBeforeUnixMs(); nb > now.UnixMilli() {
			if at := time.UnixMilli(nb); next.IsZero() || at.Before(next) {
				next = at
			}
			return false
		}
		return true
	}
	maxAttempts := int(e.sub.Record.GetMaxAttempts())
	for e.inflight < e.s.cfg.MaxInflight {
		member := e.sub.Members[e.rr%len(e.sub.Members)]
		limit := e.s.cfg.MaxDeliveryBatch
		if topicstore.IsSession(member) {
			limit = 1
		}
		var batch []*item
	lanes:
		for _, l := range e.lanes {
			for i, it := range l.q {
				if len(batch) == limit || e.inflight == e.s.cfg.MaxInflight {
					break lanes
				}
				if it.busy || !due(it) || (it.dead != "" && (i > 0 || len(batch) > 0)) {
					break
				}
				it.busy = true
				e.inflight++
				batch = append(batch, it)
				if it.dead != "" {
					break lanes // a dead letter to write again: alone
				}
			}
		}
		if len(batch) == 0 {
			break
		}
		e.rr++
		e.wg.Add(1)
		if len(batch) == 1 {
			go e.deliver(batch[0], member, maxAttempts)
		} else {
			go e.deliverBatch(batch, member, maxAttempts)
		}
	}
	return next
}

// message is the delivery of it to member, in its wire form: traceDeliver
// makes it carry its span before it becomes the grain.Message delivered.
func (e *engine) message(it *item, member string) *agentsilov1.AgentMessage {
	msg := copyMessage(it.e.GetMessage())
	msg.To, msg.Kind, msg.Subscription, msg.Attempt = member, agentsilov1.Kind_KIND_REQUEST, e.id, it.e.GetAttempts()+1
	// A delivery acts for the subscriber's owner, whoever published (see
	// grain.Authorizer): a publisher cannot lend its principal, nor claim
	// another, through a subscription.
	msg.OnBehalfOf = ""
	if a, err := grain.ParseAddress(member); err == nil {
		msg.OnBehalfOf = a.Owner
	}
	return msg
}

// deliverBatch delivers items to member in one request (grain.Batch) and
// settles each by position: those handled are acknowledged, the first not
// handled has the outcome the handler gave it, and those after it come
// again without an attempt counted.
func (e *engine) deliverBatch(items []*item, member string, maxAttempts int) {
	defer e.wg.Done()
	msgs := make([]*grain.Message, len(items))
	ctx, cancel := context.WithTimeout(e.dctx, e.s.cfg.AckTimeout)
	ends := make([]func(error), len(items))
	for i, it := range items {
		w := e.message(it, member)
		ends[i] = e.s.traceDeliver(ctx, e.id, w)
		msgs[i] = grain.MessageFromProto(w)
	}
	var n int
	var out error
	b, err := grain.Batch(msgs)
	if err != nil {
		out = err
	} else {
		n, out = grain.BatchOutcome(e.s.deliverTo(ctx, b))
	}
	cancel()
	if n < len(items) && out == nil {
		out = errs.New(codes.Unavailable, "the batch handler stopped before this message")
	}
	for i, it := range items {
		var o error
		switch {
		case i < n:
		case i == n:
			o = out
		default:
			if ends[i] != nil {
				ends[i](errs.New(codes.Aborted, "not handled: delivered again"))
			}
			e.release(it)
			continue
		}
		if ends[i] != nil {
			ends[i](o)
		}
		e.settle(it, member, maxAttempts, o)
	}
}

// deliver delivers it to member and settles the outcome.
func (e *engine) deliver(it *item, member string, maxAttempts int) {
	defer e.wg.Done()
	if it.dead != "" {
		e.kill(it, member, it.dead, it.last)
		return
	}
	w := e.message(it, member)
	ctx, cancel := context.WithTimeout(e.dctx, e.s.cfg.AckTimeout)
	end := e.s.traceDeliver(ctx, e.id, w)
	var reply *grain.Message
	var err error
	if topicstore.IsSession(member) {
		// Into the session's backlog: there, it is acknowledged. A full
		// backlog waits, as an unreachable agent does; a session gone
		// ends its subscriptions here.
		w.Kind = agentsilov1.Kind_KIND_ONE_WAY
		err = e.s.pushTo(ctx, e.id, w)
		switch errs.Code(err) {
		case codes.ResourceExhausted:
			err = errs.Wrap(codes.Unavailable, err, "session backlog full")
		case codes.NotFound:
			e.s.EndSession(member)
			err = errs.Wrap(codes.Unavailable, err, "session gone")
		}
	} else {
		reply, err = e.s.deliverTo(ctx, grain.MessageFromProto(w))
	}
	cancel()
	out := grain.Outcome(reply, err)
	if end != nil {
		end(out)
	}
	e.settle(it, member, maxAttempts, out)
}

// settle settles a delivery of it to member whose outcome was out.
func (e *engine) settle(it *item, member string, maxAttempts int, out error) {
	obs := e.s.cfg.Observe
	var oe *grain.OutcomeError
	switch {
	case out == nil:
		e.s.stats.acked.Add(1)
		if obs != nil {
			obs.Delivered("ack")
		}
		e.mu.Lock()
		e.inflight--
		it.busy = false
		e.settleLocked(it)
		e.checkFullLocked()
		e.mu.Unlock()
		e.s.ack(e.id, it.key)
		poke(e.wake)
		return
	case e.dctx.Err() != nil:
		e.release(it) // aborted: neither a failure nor an ack
		return
	case errors.As(out, &oe) && oe.Poison:
		if obs != nil {
			obs.Delivered("poison")
		}
		e.kill(it, member, "poison: "+oe.Reason, out.Error())
		return
	}
	if oe == nil && errs.Code(out) == codes.Unavailable {
		if obs != nil {
			obs.Delivered("unavailable")
		}
		e.mu.Lock()
		it.unavailable++
		ne := proto.Clone(it.e).(*topicstore.Entry)
		ne.NotBeforeUnixMs = e.s.cfg.clk.Now().Add(retry.Delay(e.s.cfg.RetryMin, e.s.cfg.RetryMax, it.unavailable)).UnixMilli()
		it.e = ne
		e.mu.Unlock()
		e.s.stats.unavailable.Add(1)
		e.release(it)
		return
	}
	it.unavailable = 0
	attempts := int(it.e.GetAttempts()) + 1
	wait := retry.Delay(e.s.cfg.RetryMin, e.s.cfg.RetryMax, attempts)
	outcome := "error"
	if oe != nil {
		outcome = "retry"
		if oe.After > 0 {
			wait = oe.After
		}
	}
	if obs != nil {
		obs.Delivered(outcome)
	}
	last := clipErr(out)
	if attempts >= maxAttempts {
		e.kill(it, member, "attempts exhausted", last)
		return
	}
	ne := proto.Clone(it.e).(*topicstore.Entry)
	ne.Attempts, ne.LastError, ne.Agent = uint32(attempts), last, member
	ne.NotBeforeUnixMs = e.s.cfg.clk.Now().Add(wait).UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := e.s.cfg.store.Update(ctx, e.id, it.key, ne); err != nil && errs.Code(err) != codes.NotFound {
		// Kept in memory: a restart counts this attempt again.
		e.s.cfg.Logger.Warn("topics: could not record a failed delivery", "subscription", e.id, "err", err)
	}
	cancel()
	e.mu.Lock()
	it.e = ne
	e.mu.Unlock()
	// Counted once the not-before time is set: a test that waits for the
	// count and then advances its clock finds the retry due.
	if outcome == "retry" {
		e.s.stats.retried.Add(1)
	} else {
		e.s.stats.failed.Add(1)
	}
	e.release(it)
}

// release ends it's delivery without removing it.
func (e *engine) release(it *item) {
	e.mu.Lock()
	it.busy = false
	e.inflight--
	e.mu.Unlock()
	poke(e.wake)
}

// kill moves it to the dead letters; if the store fails, the next dispatch
// of it tries again after RetryMin.
func (e *engine) kill(it *item, member, reason, last string) {
	d := &DeadLetter{
		Subscription: e.id,
		Message:      it.e.GetMessage(),
		Reason:       reason,
		Attempts:     it.e.GetAttempts() + 1,
		LastError:    last,
		DeadAt:       timestamppb.New(e.s.cfg.clk.Now()),
		Agent:        member,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := e.s.cfg.store.Kill(ctx, e.id, it.key, d)
	cancel()
	if err != nil && errs.Code(err) != codes.NotFound {
		e.s.cfg.Logger.Warn("topics: could not write a dead letter; trying again", "subscription", e.id, "err", err)
		e.mu.Lock()
		it.dead, it.last = reason, last
		ne := proto.Clone(it.e).(*topicstore.Entry)
		ne.NotBeforeUnixMs = e.s.cfg.clk.Now().Add(e.s.cfg.RetryMin).UnixMilli()
		it.e = ne
		e.mu.Unlock()
		e.release(it)
		return
	}
	if err == nil {
		e.s.stats.dead.Add(1)
		if obs := e.s.cfg.Observe; obs != nil {
			obs.DeadLettered()
		}
	}
	e.mu.Lock()
	it.busy = false
	e.inflight--
	e.settleLocked(it)
	e.checkFullLocked()
	e.mu.Unlock()
	poke(e.wake)
}

// flagger writes the full flag of the backlog when it changes.
func (e *engine) flagger() {
	defer e.wg.Done()
	b := retry.New(100*time.Millisecond, 2*time.Second, nil)
	for {
		select {
		case <-e.ackWake:
		case <-e.ctx.Done():
			return
		}
		if !e.flush(e.ctx) {
			if b.Wait(e.ctx, nil) {
				poke(e.ackWake)
			}
		} else {
			b.Reset()
		}
	}
}

// flush writes the full flag; false if the store failed.
func (e *engine) flush(ctx context.Context) bool {
	e.mu.Lock()
	want, is := e.wantFull, e.isFull
	e.mu.Unlock()
	if want == is {
		return true
	}
	if err := e.s.cfg.store.SetFull(ctx, e.id, want); err != nil {
		e.s.cfg.Logger.Warn("topics: could not mark the backlog", "subscription", e.id, "full", want, "err", err)
		return false
	}
	e.mu.Lock()
	e.isFull = want
	e.mu.Unlock()
	return true
}

// clipErr is an error's text, bounded for storage.
func clipErr(err error) string {
	s := err.Error()
	if len(s) > 1024 {
		s = s[:1024] + "..."
	}
	return s
}
