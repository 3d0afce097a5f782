// Package deadline gives many waiters a deadline without a timer each:
// deadlines are rounded up to a tick of Tick, and all waiters due in one tick
// share one channel, closed by one timer. Most calls of a busy silo fall in
// the slot the previous call used, found with one atomic load. The runtime
// uses it for Asks without a deadline of their own, and the silo-to-silo
// transport for the requests peers send.
package deadline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Tick is the resolution of a Slots deadline.
const Tick = int64(10 * time.Millisecond)

// Slots hands out shared deadline channels. The zero value is ready to use.
type Slots struct {
	mu     sync.Mutex
	last   atomic.Pointer[slot]
	slots  map[int64]*slot
	closed bool
}

type slot struct {
	tick int64 // deadline / Tick
	ch   chan struct{}
	t    *time.Timer
}

// After returns a channel closed at or after deadline (Unix ns), within Tick,
// and the rounded deadline.
func (d *Slots) After(deadline int64) (<-chan struct{}, time.Time) {
	tick := (deadline + Tick - 1) / Tick
	at := time.Unix(0, tick*Tick)
	if s := d.last.Load(); s != nil && s.tick == tick {
		return s.ch, at
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[tick]
	if s == nil {
		s = &slot{tick: tick, ch: make(chan struct{})}
		if d.slots == nil {
			d.slots = make(map[int64]*slot)
		}
		if d.closed {
			close(s.ch)
			return s.ch, at
		}
		d.slots[tick] = s
		s.t = time.AfterFunc(time.Until(at), func() { d.fire(s) })
	}
	d.last.Store(s)
	return s.ch, at
}

func (d *Slots) fire(s *slot) {
	d.mu.Lock()
	delete(d.slots, s.tick)
	d.mu.Unlock()
	close(s.ch)
}

// Close expires every pending deadline, and every later one at once, and
// stops the timers.
func (d *Slots) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for tick, s := range d.slots {
		if s.t.Stop() {
			close(s.ch)
		}
		delete(d.slots, tick)
	}
}

// Context returns a context that ends at the rounded deadline (Unix ns) from
// d, with parent's values. parent must have no Done channel of its own (its
// cancellation would be lost): use context.WithDeadline for such a parent.
func (d *Slots) Context(parent context.Context, deadline int64) context.Context {
	done, at := d.After(deadline)
	return &slotCtx{Context: parent, done: done, at: at}
}

type slotCtx struct {
	context.Context
	done <-chan struct{}
	at   time.Time
}

func (c *slotCtx) Deadline() (time.Time, bool) { return c.at, true }
func (c *slotCtx) Done() <-chan struct{}       { return c.done }
func (c *slotCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
