// Package retry is the one backoff of the module: waits that double from a
// minimum to a cap, with jitter so that silos retrying the same thing do not
// move in lockstep, on an injectable clock. Every retry loop (etcd watches,
// revocations, reconnects, claims, the SDK's failover) uses it.
package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
)

// Jitter is the fraction by which a wait is randomly shortened or
// lengthened.
const Jitter = 0.2

// Backoff hands out the waits of one retry loop. The zero value is not
// usable; use New. It is not safe for concurrent use: one loop, one Backoff.
type Backoff struct {
	min, max time.Duration
	clk      clock.Clock
	next     time.Duration
}

// New returns a backoff whose waits start at min and double up to max, on
// clk (nil: the real clock).
func New(min, max time.Duration, clk clock.Clock) *Backoff {
	if clk == nil {
		clk = clock.Real{}
	}
	if max < min {
		max = min
	}
	return &Backoff{min: min, max: max, clk: clk, next: min}
}

// Next returns the next wait: the current step with jitter; the step
// doubles, up to the cap.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	j := 1 + Jitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * j)
}

// Reset starts the waits over from the minimum, after a success.
func (b *Backoff) Reset() { b.next = b.min }

// Wait waits the next wait, or until ctx ends (false) or wake is closed or
// sends (true, early). wake may be nil.
func (b *Backoff) Wait(ctx context.Context, wake <-chan struct{}) bool {
	t := b.clk.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}

// Delay returns the wait before the nth retry of something that failed n
// times (n from 1): min doubled n-1 times, capped at max, with jitter. For
// retries that are not one loop's (a message's redeliveries, spread over
// time and silos).
func Delay(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return time.Duration(float64(d) * (1 + Jitter*(2*rand.Float64()-1)))
}
