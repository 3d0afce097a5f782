package reminders

import "time"

// Clock is the scheduler's time source; tests replace it with a fake. Its
// methods are called concurrently.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped-or-running timer that sends on C after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the scheduler uses.
type Timer interface {
	C() <-chan time.Time
	// Reset changes the timer to fire after d (Go 1.23 semantics: no stale
	// value is received after Reset or Stop).
	Reset(d time.Duration)
	Stop()
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
