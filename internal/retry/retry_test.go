package retry

import (
	"context"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
)

func TestBackoffDoublesToTheCapWithJitter(t *testing.T) {
	b := New(100*time.Millisecond, time.Second, nil)
	steps := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, s := range steps {
		want := s * time.Millisecond
		got := b.Next()
		lo, hi := time.Duration(float64(want)*(1-Jitter)), time.Duration(float64(want)*(1+Jitter))
		if got < lo || got > hi {
			t.Fatalf("wait %d = %v, want %v ± %v", i, got, want, Jitter)
		}
	}
	b.Reset()
	if got := b.Next(); got > 120*time.Millisecond {
		t.Fatalf("after Reset: %v, want about the minimum", got)
	}
}

func TestWaitOnTheClock(t *testing.T) {
	fake := clock.NewFake(time.Now())
	b := New(time.Second, time.Minute, fake)
	done := make(chan bool)
	go func() { done <- b.Wait(context.Background(), nil) }()
	for {
		n, added := fake.Waiting()
		if n > 0 {
			break
		}
		<-added
	}
	select {
	case <-done:
		t.Fatal("Wait returned before the clock moved")
	default:
	}
	fake.Advance(2 * time.Second)
	if !<-done {
		t.Fatal("Wait = false after the clock moved")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx, nil) {
		t.Fatal("Wait = true with an ended context")
	}
	wake := make(chan struct{})
	close(wake)
	if !b.Wait(context.Background(), wake) {
		t.Fatal("Wait = false when woken")
	}
}

// Delay doubles from min per failure, caps at max, and jitters by at most
// Jitter either way.
func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {10, 8 * time.Second}, {0, time.Second}} {
		for range 100 {
			d := Delay(time.Second, 8*time.Second, tc.n)
			lo, hi := time.Duration(float64(tc.want)*(1-Jitter)), time.Duration(float64(tc.want)*(1+Jitter))
			if d < lo || d > hi {
				t.Fatalf("Delay(1s, 8s, %d) = %v, want within %v..%v", tc.n, d, lo, hi)
			}
		}
	}
}

// TestPolicies: a policy's backoff and delays follow its bounds, and every
// named policy has a minimum below its cap.
func TestPolicies(t *testing.T) {
	for name, p := range map[string]Policy{"EtcdWatch": EtcdWatch, "EtcdLease": EtcdLease, "Redeliver": Redeliver, "Reattach": Reattach, "Resend": Resend, "Rejoin": Rejoin, "Restart": Restart} {
		if p.Min <= 0 || p.Max < p.Min {
			t.Errorf("%s: %v to %v", name, p.Min, p.Max)
		}
		if d := p.New(nil).Next(); d < time.Duration(float64(p.Min)*(1-Jitter)) || d > time.Duration(float64(p.Min)*(1+Jitter)) {
			t.Errorf("%s: first wait %v, want about %v", name, d, p.Min)
		}
		if p.Step(1) != p.Min || p.Step(2) != min(2*p.Min, p.Max) || p.Step(100) != p.Max {
			t.Errorf("%s: steps %v %v %v", name, p.Step(1), p.Step(2), p.Step(100))
		}
		if d := p.Delay(100); d > time.Duration(float64(p.Max)*(1+Jitter)) || d < time.Duration(float64(p.Max)*(1-Jitter)) {
			t.Errorf("%s: 100th delay %v, want about %v", name, d, p.Max)
		}
	}
}
