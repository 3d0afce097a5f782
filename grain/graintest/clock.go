package graintest

import (
	"slices"
	"sync"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
)

// fakeClock is the Env's time: it moves only in Advance, which runs every
// callback that came due before it returns (in due order), so that what a
// test asks after Advance sees every tick, timer and reminder it set off.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[*fakeTimer]bool
	// advancing serializes Advance.
	advancing sync.Mutex
}

type fakeTimer struct {
	clk  *fakeClock
	c    chan time.Time // NewTimer's, else nil
	f    func()         // AfterFunc's, else nil
	when time.Time
	seq  int // order among timers due at the same time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, timers: map[*fakeTimer]bool{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{clk: c, f: f}
	t.Reset(d)
	return t
}

// advance moves the clock on by d, one due time at a time: the timers due
// at each are fired (a channel timer sends, an AfterFunc's f runs before
// advance goes on), and what they set in turn fires too if it is due by
// the end.
func (c *fakeClock) advance(d time.Duration) {
	c.advancing.Lock()
	defer c.advancing.Unlock()
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for t := range c.timers {
			if t.when.After(end) {
				continue
			}
			if next == nil || t.when.Before(next.when) || t.when.Equal(next.when) && t.seq < next.seq {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		delete(c.timers, next)
		if next.when.After(c.now) {
			c.now = next.when
		}
		now := c.now
		c.mu.Unlock()
		if next.f != nil {
			next.f()
		} else {
			select {
			case next.c <- now:
			default:
			}
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.c != nil {
		select { // no stale value after Reset
		case <-t.c:
		default:
		}
	}
	c.seq++
	t.when, t.seq = c.now.Add(d), c.seq
	c.timers[t] = true
}

func (t *fakeTimer) Stop() {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.timers, t)
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
}

// pending returns the due times of the timers set, in order.
func (c *fakeClock) pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ws []time.Time
	for t := range c.timers {
		ws = append(ws, t.when)
	}
	slices.SortFunc(ws, func(a, b time.Time) int { return a.Compare(b) })
	return ws
}
