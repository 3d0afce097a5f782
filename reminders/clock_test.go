package reminders

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when a test calls Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock on by d and fires the timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireLocked()
	}
}

type fakeTimer struct {
	clk    *fakeClock
	c      chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	t.drain()
	t.when, t.active = c.now.Add(d), true
	found := false
	for _, o := range c.timers {
		found = found || o == t
	}
	if !found {
		c.timers = append(c.timers, t)
	}
	t.fireLocked()
}

func (t *fakeTimer) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.active = false
	t.drain()
}

func (t *fakeTimer) fireLocked() {
	if t.active && !t.when.After(t.clk.now) {
		t.active = false
		select {
		case t.c <- t.clk.now:
		default:
		}
	}
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}
