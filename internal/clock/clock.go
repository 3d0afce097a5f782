// Package clock makes time replaceable: the grain runtime's idle collection
// and timers and the reminder scheduler take a Clock, which is Real in a
// silo and a Fake in tests, so that tests move time on instead of waiting
// for it.
//
//	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
//	cfg.Clock = clk
//	...
//	clk.Advance(15 * time.Minute) // fires what came due, at once
package clock

import "time"

// Clock is a time source. Its methods are called concurrently, from any
// goroutine.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a running timer that sends the time on its C after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a running timer that calls f in its own goroutine
	// after d; its C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that agentsilo uses.
type Timer interface {
	// C is the channel a NewTimer timer sends on; nil for AfterFunc.
	C() <-chan time.Time
	// Reset changes the timer to fire after d (Go 1.23 semantics: no stale
	// value is received after Reset or Stop).
	Reset(d time.Duration)
	// Stop stops the timer; an AfterFunc's f already started runs on.
	Stop()
}

// Real is the wall clock, through package time.
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
