package grain

import (
	"sync"
	"sync/atomic"
	"time"
)

// deadlines gives Asks without a deadline of their own the default one
// without a timer each: deadlines are rounded up to a tick of deadlineTick,
// and all Asks due in one tick share one channel, closed by one timer. Most
// Asks of a busy silo fall in the slot the previous Ask used, found with one
// atomic load.
type deadlines struct {
	mu     sync.Mutex
	last   atomic.Pointer[deadlineSlot]
	slots  map[int64]*deadlineSlot
	closed bool
}

type deadlineSlot struct {
	tick int64 // deadline / deadlineTick
	ch   chan struct{}
	t    *time.Timer
}

const deadlineTick = int64(10 * time.Millisecond)

// after returns a channel closed at or after deadline (Unix ns), within
// deadlineTick, and the rounded deadline.
func (d *deadlines) after(deadline int64) (<-chan struct{}, time.Time) {
	tick := (deadline + deadlineTick - 1) / deadlineTick
	at := time.Unix(0, tick*deadlineTick)
	if s := d.last.Load(); s != nil && s.tick == tick {
		return s.ch, at
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[tick]
	if s == nil {
		s = &deadlineSlot{tick: tick, ch: make(chan struct{})}
		if d.slots == nil {
			d.slots = make(map[int64]*deadlineSlot)
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

func (d *deadlines) fire(s *deadlineSlot) {
	d.mu.Lock()
	delete(d.slots, s.tick)
	d.mu.Unlock()
	close(s.ch)
}

// close expires every pending deadline and stops their timers.
func (d *deadlines) close() {
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
