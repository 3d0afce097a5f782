package transport

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsilo/agentsilo/internal/deadline"
)

// Cancellation travels as gRPC carries an RPC's: when the context of an Ask
// ends by cancellation (not by its deadline, which the receiver knows) after
// its request was written to the stream, the sender writes a cancel notice
// for the call id on the same stream, and the receiver cancels the context
// of that call's handler. The sender pays nothing until a cancellation: Ask
// already waits on its context. The receiver keeps each request it is
// handling in its stream's calls, the table a notice looks the call up in,
// until the reply is queued; deadlines there share one timer per tick of
// deadline.Tick per stream, so no call has a goroutine or timer of its own.

// cancelNotice returns the envelope that cancels call id.
func cancelNotice(id uint64) *Envelope { return &Envelope{CallId: id, Cancel: true} }

// sendCancel queues a cancel notice for call id, if there is room at once:
// a notice lost to a full queue or a broken stream leaves the handler to
// its deadline, as before notices existed.
func (p *peer) sendCancel(id uint64) {
	if p.usable() != nil {
		return
	}
	p.w.queued.Add(1)
	if !p.queue.tryPut(item{env: cancelNotice(id), size: 16}) {
		p.w.queued.Add(-1)
		p.t.logger.Debug("cancel notice not sent: queue full", "peer", p.addr, "call", id)
	}
}

// callCtx is the context of the handler of one inbound request. It ends
// when the request's deadline passes (DeadlineExceeded), or with Canceled
// when the peer sends a cancel notice for it, when the transport closes,
// and, for a request without a deadline, when its stream ends (a request
// with one runs on to it, as before notices: the caller's Ask has failed
// with Unavailable, saying that the request may have run). It has the
// stream's values.
type callCtx struct {
	context.Context // the stream's values, without its cancellation
	// done is made on the first call of Done: most handlers never ask for
	// it, and an Ask through a silo then costs one channel less.
	done atomic.Pointer[chan struct{}]
	at   int64 // the request's deadline, Unix ms; 0 if none

	mu    sync.Mutex
	err   error
	after []*afterFunc // see AfterFunc

	// resp is the envelope of the call's reply (see inbound.respond): made
	// with the call, one allocation less per request.
	resp Envelope

	// guarded by the stream's calls.mu
	id   uint64
	tick int64 // the deadline's tick while in a tick list, else 0
	idx  int   // its index there
}

type afterFunc struct{ f func() }

func (c *callCtx) Deadline() (time.Time, bool) {
	if c.at == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(c.at), true
}

func (c *callCtx) Done() <-chan struct{} {
	if d := c.done.Load(); d != nil {
		return *d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.done.Load(); d != nil {
		return *d
	}
	if c.err != nil {
		c.done.Store(&closedDone)
		return closedDone
	}
	d := make(chan struct{})
	c.done.Store(&d)
	return d
}

// closedDone is the Done of a call that ended before anyone asked.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f once c ends (at once, on a goroutine of its own, if it
// has), unless stop is called first. The context package uses it for the
// contexts derived from c (context.WithCancel, context.AfterFunc), which then
// need no goroutine of their own to follow c.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	c.after = append(c.after, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.after {
			if x == a {
				last := len(c.after) - 1
				c.after[i], c.after[last] = c.after[last], nil
				c.after = c.after[:last]
				return true
			}
		}
		return false
	}
}

// cancel ends c with err, if it has not ended.
func (c *callCtx) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if d := c.done.Load(); d != nil {
		close(*d)
	} else {
		c.done.Store(&closedDone)
	}
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, a := range after {
		a.f()
	}
}

// calls is the table of the requests an inbound stream is handling.
type calls struct {
	values context.Context // the stream's, without its cancellation

	mu    sync.Mutex
	m     map[uint64]*callCtx
	ticks map[int64]*tickCalls
	// spare is the tick of the one list in ticks that is empty (0: none),
	// kept with its timer for the calls that come next: deadlines move on
	// by a tick every 10 ms, so at one call in flight each call would
	// otherwise make a list and a timer, and stop the timer.
	spare  int64
	closed bool // the stream ended: new calls start cancelled
	// After the stream ended with calls that have deadlines: stops the
	// AfterFunc that cancels them if the transport closes first.
	stopOnClose func() bool
}

// tickCalls are the calls whose deadlines fall in one tick, and the timer
// that ends them.
type tickCalls struct {
	calls []*callCtx
	timer *time.Timer
}

// add registers the request env and returns its handler's context, or nil if
// its deadline has passed.
func (cs *calls) add(env *Envelope) *callCtx {
	// (A deadline past the year 2262 is taken as then: its tick stays in
	// range.)
	c := &callCtx{Context: cs.values, id: env.CallId, at: min(env.DeadlineUnixMs, math.MaxInt64/int64(time.Millisecond))}
	if c.at != 0 && time.Now().UnixMilli() >= c.at {
		return nil
	}
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		c.cancel(context.Canceled)
		return c
	}
	if cs.m == nil {
		cs.m = make(map[uint64]*callCtx)
	}
	cs.m[c.id] = c
	if c.at != 0 {
		tick := (c.at*int64(time.Millisecond) + deadline.Tick - 1) / deadline.Tick
		tc := cs.ticks[tick]
		if tick == cs.spare {
			cs.spare = 0
		}
		if tc == nil {
			if cs.ticks == nil {
				cs.ticks = make(map[int64]*tickCalls)
			}
			tc = &tickCalls{}
			tc.timer = time.AfterFunc(time.Until(time.Unix(0, tick*deadline.Tick)), func() { cs.expire(tick) })
			cs.ticks[tick] = tc
		}
		c.tick, c.idx = tick, len(tc.calls)
		tc.calls = append(tc.calls, c)
	}
	cs.mu.Unlock()
	return c
}

// remove forgets c, whose reply is queued: a later notice for it is ignored.
func (cs *calls) remove(c *callCtx) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m[c.id] == c {
		delete(cs.m, c.id)
	}
	cs.untick(c)
}

// untick takes c out of its tick list. cs.mu is held.
func (cs *calls) untick(c *callCtx) {
	if c.tick == 0 {
		return
	}
	if tc := cs.ticks[c.tick]; tc != nil && c.idx < len(tc.calls) && tc.calls[c.idx] == c {
		last := len(tc.calls) - 1
		moved := tc.calls[last]
		tc.calls[c.idx], moved.idx = moved, c.idx
		tc.calls[last] = nil
		tc.calls = tc.calls[:last]
		if len(tc.calls) == 0 {
			// Kept as the spare, unless the stream ended; the spare
			// before it, if another, goes.
			if cs.spare != 0 && cs.spare != c.tick {
				cs.dropTick(cs.spare)
			}
			cs.spare = c.tick
			if cs.closed {
				cs.dropTick(c.tick)
				cs.spare = 0
				cs.drained()
			}
		}
	}
	c.tick = 0
}

// dropTick stops the timer of tick's list and forgets the list. cs.mu is
// held.
func (cs *calls) dropTick(tick int64) {
	if tc := cs.ticks[tick]; tc != nil {
		tc.timer.Stop()
		delete(cs.ticks, tick)
	}
}

// drained lets go of the transport once the stream has ended and its last
// call with a deadline is done. cs.mu is held.
func (cs *calls) drained() {
	if cs.closed && len(cs.ticks) == 0 && cs.stopOnClose != nil {
		cs.stopOnClose()
		cs.stopOnClose = nil
	}
}

// expire ends the calls whose deadlines fall in tick.
func (cs *calls) expire(tick int64) {
	cs.mu.Lock()
	tc := cs.ticks[tick]
	delete(cs.ticks, tick)
	if tick == cs.spare {
		cs.spare = 0
	}
	var due []*callCtx
	if tc != nil {
		due = tc.calls
		for _, c := range due {
			c.tick = 0
		}
	}
	cs.drained()
	cs.mu.Unlock()
	for _, c := range due {
		c.cancel(context.DeadlineExceeded)
	}
}

// cancel cancels the call id, if it is being handled.
func (cs *calls) cancel(id uint64) {
	cs.mu.Lock()
	c := cs.m[id]
	cs.mu.Unlock()
	if c != nil {
		c.cancel(context.Canceled)
	}
}

// close is called when the stream ends: its replies can no longer reach
// the caller, and no notice can come. The calls without a deadline are
// cancelled (nothing else would end them); those with one run on to it, or
// until transport ends (the transport's context).
func (cs *calls) close(transport context.Context) {
	cs.mu.Lock()
	cs.closed = true
	var now []*callCtx
	for _, c := range cs.m {
		if c.at == 0 {
			now = append(now, c)
		}
	}
	cs.m = nil
	if cs.spare != 0 {
		cs.dropTick(cs.spare)
		cs.spare = 0
	}
	if len(cs.ticks) > 0 {
		cs.stopOnClose = context.AfterFunc(transport, cs.cancelAll)
	}
	cs.mu.Unlock()
	for _, c := range now {
		c.cancel(context.Canceled)
	}
}

// cancelAll cancels the calls with deadlines left when the transport
// closes.
func (cs *calls) cancelAll() {
	cs.mu.Lock()
	var all []*callCtx
	for _, tc := range cs.ticks {
		tc.timer.Stop()
		for _, c := range tc.calls {
			c.tick = 0
			all = append(all, c)
		}
	}
	cs.ticks = nil
	cs.spare = 0
	cs.mu.Unlock()
	for _, c := range all {
		c.cancel(context.Canceled)
	}
}

// inFlight returns the number of calls being handled (for tests).
func (cs *calls) inFlight() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.m)
}
