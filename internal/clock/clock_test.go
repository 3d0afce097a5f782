package clock

import (
	"testing"
	"time"
)

func TestFakeTimer(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := NewFake(start)
	tm := c.NewTimer(time.Minute)
	c.Advance(time.Minute - time.Nanosecond)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Nanosecond)
	select {
	case at := <-tm.C():
		if !at.Equal(start.Add(time.Minute)) {
			t.Fatalf("fired with %v", at)
		}
	default:
		t.Fatal("did not fire when due")
	}
	if running(c) != 0 {
		t.Fatalf("%d timers running after firing", running(c))
	}
	// Reset after Stop: no stale value; Reset(0) fires at once.
	tm.Reset(time.Second)
	c.Advance(time.Second)
	tm.Stop()
	select {
	case <-tm.C():
		t.Fatal("stale value after Stop")
	default:
	}
	tm.Reset(0)
	select {
	case <-tm.C():
	default:
		t.Fatal("Reset(0) did not fire at once")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Minute + time.Second)) {
		t.Fatalf("Now = %v", got)
	}
}

func TestFakeAfterFunc(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	ran := make(chan int, 3)
	c.AfterFunc(2*time.Second, func() { ran <- 2 })
	c.AfterFunc(time.Second, func() { ran <- 1 })
	stopped := c.AfterFunc(time.Second, func() { ran <- -1 })
	stopped.Stop()
	if running(c) != 2 {
		t.Fatalf("%d timers, want 2", running(c))
	}
	c.Advance(3 * time.Second)
	got := map[int]bool{<-ran: true, <-ran: true}
	if !got[1] || !got[2] {
		t.Fatalf("ran %v", got)
	}
	if running(c) != 0 {
		t.Fatalf("%d timers left", running(c))
	}
	if tm := c.AfterFunc(time.Second, func() {}); tm.C() != nil {
		t.Fatal("an AfterFunc timer has a channel")
	}
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
	tm := c.NewTimer(0)
	<-tm.C()
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	<-done
	tm.Stop()
}

func running(c *Fake) int {
	n, _ := c.Waiting()
	return n
}

// Since measures from t by the clock given: the fake one's time, or the
// real monotonic clock, which a wall clock step does not move.
func TestSince(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	f := NewFake(start)
	f.Advance(90 * time.Second)
	if d := Since(f, start); d != 90*time.Second {
		t.Fatalf("Since on the fake clock: %v, want 90s", d)
	}
	before := time.Now()
	if d := Since(Real{}, before); d < 0 {
		t.Fatalf("Since on the real clock, just after: %v", d)
	}
	if d := Since(Real{}, before.Add(-time.Hour)); d < time.Hour {
		t.Fatalf("Since an hour ago: %v", d)
	}
	// Without a monotonic reading, it is the wall clock's difference.
	if d := Since(Real{}, before.Round(0).Add(-time.Minute)); d < time.Minute {
		t.Fatalf("Since a wall time a minute ago: %v", d)
	}
}
