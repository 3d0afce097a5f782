package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance is called: the in-memory
// clock of tests. A timer fires (its C receives, its AfterFunc's f starts in
// a goroutine of its own) during the Advance or Reset that brings it due, so
// a test that advances the clock knows that everything due has been set off,
// and waits on the named condition it expects, never on elapsed time. Its
// methods are safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{} // the running ones
}

// NewFake returns a Fake clock that reads now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, timers: make(map[*fakeTimer]struct{})}
}

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

// Advance moves the clock on by d and fires, in order of their due times,
// the timers that came due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for t := range c.timers {
		if !t.when.After(c.now) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *fakeTimer) int { return a.when.Compare(b.when) })
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

// Timers returns the number of running timers (created or reset, and
// neither fired nor stopped since).
func (c *Fake) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	clk  *Fake
	c    chan time.Time // nil for AfterFunc
	f    func()
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	c := t.clk
	c.mu.Lock()
	t.drain()
	t.when = c.now.Add(d)
	c.timers[t] = struct{}{}
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
	delete(t.clk.timers, t)
	t.drain()
}

// fireLocked stops t and sends on its channel, or returns its f to run.
func (t *fakeTimer) fireLocked() func() {
	delete(t.clk.timers, t)
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
