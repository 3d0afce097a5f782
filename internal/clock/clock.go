// Package clock is the time source of the parts whose behaviour depends on
// time (membership's keepalives and fencing, routing's waits, reminders,
// idle collection): Real in production, Fake in tests, which moves only when
// the test says so.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers. Its methods are called
// concurrently.
type Clock interface {
	Now() time.Time
	// NewTimer returns a running timer that sends on C after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that callers use.
type Timer interface {
	C() <-chan time.Time
	// Reset changes the timer to fire after d (Go 1.23 semantics: no stale
	// value is received after Reset or Stop).
	Reset(d time.Duration)
	Stop()
}

// Since is clk.Now().Sub(t).
func Since(clk Clock, t time.Time) time.Duration { return clk.Now().Sub(t) }

// Real is the wall clock (with its monotonic reading).
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// Fake is a Clock that moves only when Advance is called. The zero value is
// not usable; use NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan struct{} // closed and replaced when a timer is set
}

// NewFake returns a fake clock showing now.
func NewFake(now time.Time) *Fake { return &Fake{now: now, added: make(chan struct{})} }

// Now implements Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements Clock.
func (c *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock on by d and fires the timers that came due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireLocked()
	}
}

// Waiting returns how many timers are set and not yet fired, and a channel
// closed when the next one is set: a test waits for the code under test to
// reach its timer before it advances the clock.
func (c *Fake) Waiting() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.active {
			n++
		}
	}
	return n, c.added
}

type fakeTimer struct {
	clk    *Fake
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
	close(c.added)
	c.added = make(chan struct{})
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
