// Package clock is the time source of the parts whose behaviour depends on
// time (membership's keepalives and fencing, routing's waits, reminders,
// idle collection and agents' timers): Real in production, Fake in tests,
// which moves only when the test says so.
//
//	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
//	cfg.Clock = clk
//	...
//	clk.Advance(15 * time.Minute) // fires what came due, at once
package clock

import (
	"slices"
	"sync"
	"time"
)

// Clock tells the time and makes timers. Its methods are called
// concurrently.
type Clock interface {
	Now() time.Time
	// NewTimer returns a running timer that sends on C after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a running timer that calls f in its own goroutine
	// after d; its C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that callers use.
type Timer interface {
	// C is the channel a NewTimer timer sends on; nil for AfterFunc.
	C() <-chan time.Time
	// Reset changes the timer to fire after d (Go 1.23 semantics: no stale
	// value is received after Reset or Stop).
	Reset(d time.Duration)
	// Stop stops the timer; an AfterFunc's f already started runs on.
	Stop()
}

// Since is clk.Now().Sub(t). On the Real clock it reads the monotonic clock
// alone (time.Since), where Now reads the wall clock too: the fencing check
// before every turn calls it.
func Since(clk Clock, t time.Time) time.Duration {
	if _, ok := clk.(Real); ok {
		return time.Since(t)
	}
	return clk.Now().Sub(t)
}

// Real is the wall clock (with its monotonic reading).
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// Fake is a Clock that moves only when Advance is called. A timer fires (its
// C receives, or its AfterFunc's f starts in a goroutine of its own) during
// the Advance or Reset that brings it due, so a test that advances the clock
// knows that everything due has been set off, and waits for the named
// condition it expects, never for elapsed time. The zero value is not
// usable; use NewFake.
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

// AfterFunc implements Clock.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{clk: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock on by d and fires the timers that came due, in
// the order of their due times.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	due := make([]*fakeTimer, 0, len(c.timers))
	for _, t := range c.timers {
		if t.active && !t.when.After(c.now) {
			due = append(due, t)
		}
	}
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.when.Compare(b.when) })
	var fs []func()
	for _, t := range due {
		if f := t.fireLocked(); f != nil {
			fs = append(fs, f)
		}
	}
	c.mu.Unlock()
	for _, f := range fs {
		go f()
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
	c      chan time.Time // nil for AfterFunc
	f      func()
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	c := t.clk
	c.mu.Lock()
	t.drain()
	t.when, t.active = c.now.Add(d), true
	if !slices.Contains(c.timers, t) {
		c.timers = append(c.timers, t)
	}
	close(c.added)
	c.added = make(chan struct{})
	var f func()
	if !t.when.After(c.now) {
		f = t.fireLocked()
	}
	c.mu.Unlock()
	if f != nil {
		go f()
	}
}

func (t *fakeTimer) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.active = false
	t.drain()
}

// fireLocked fires an active timer that is due: it sends on C, or returns
// the AfterFunc's f for the caller to start once the clock is unlocked.
func (t *fakeTimer) fireLocked() func() {
	if !t.active || t.when.After(t.clk.now) {
		return nil
	}
	t.active = false
	if t.c == nil {
		return t.f
	}
	select {
	case t.c <- t.clk.now:
	default:
	}
	return nil
}

func (t *fakeTimer) drain() {
	if t.c == nil {
		return
	}
	select {
	case <-t.c:
	default:
	}
}
