// Package retry is the one backoff of the module: waits that double from a
// minimum to a cap, with jitter so that silos retrying the same thing do not
// move in lockstep, on an injectable clock. Every retry loop (etcd watches,
// revocations, reconnects, claims, the SDK's failover) uses it, with one of
// the named policies below where one fits (a loop whose bounds are a
// user's setting passes them to New).
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

// Policy is a retry loop's schedule: waits from Min, doubling up to Max,
// each lengthened or shortened by up to Jitter.
type Policy struct {
	Min, Max time.Duration
}

// The named policies of the module's retry loops.
var (
	// EtcdWatch paces re-opening an etcd watch or reading again while etcd
	// is away (100 ms to 5 s): a silo notices etcd's return within
	// seconds without busying it.
	EtcdWatch = Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	// EtcdLease paces taking a new etcd lease after one was lost, and
	// sweeping again after a failed sweep (1 s to 30 s): each attempt is
	// a write, and nothing waits on it.
	EtcdLease = Policy{Min: time.Second, Max: 30 * time.Second}
	// Redeliver paces sending a result again to an agent that is
	// unavailable (1 s to 30 s): the agent may be moving or its silo
	// restarting.
	Redeliver = Policy{Min: time.Second, Max: 30 * time.Second}
	// Reattach paces the SDK's rounds of re-attaching a session through
	// its gateways, and its re-subscribing (50 ms to 5 s): a gateway back
	// from a restart is found within 5 s, as gRPC redials it.
	Reattach = Policy{Min: 50 * time.Millisecond, Max: 5 * time.Second}
	// Resend paces the SDK's sending again of a call that was refused
	// before it ran, or that carries an idempotency key (50 ms to 1 s):
	// the caller's deadline is running.
	Resend = Policy{Min: 50 * time.Millisecond, Max: time.Second}
	// Rejoin paces starting again a silo that the others could not reach
	// and that drained (5 s to 1 min): until its peer port is fixed, each
	// new run is found unreachable again, and each join and leave changes
	// every silo's view.
	Rejoin = Policy{Min: 5 * time.Second, Max: time.Minute}
	// Restart paces a silo program's attempts to start a fenced silo again
	// while the start fails (1 s to 10 s): the usual cause is etcd still
	// away, and the silo serves nothing until a start succeeds, so the
	// cap stays short.
	Restart = Policy{Min: time.Second, Max: 10 * time.Second}
)

// New returns a backoff following p, on clk (nil: the real clock).
func (p Policy) New(clk clock.Clock) *Backoff { return New(p.Min, p.Max, clk) }

// Delay returns the wait before the nth retry following p (see Delay).
func (p Policy) Delay(n int) time.Duration { return Delay(p.Min, p.Max, n) }

// Step returns the nth wait of p (n from 1) without jitter: Min doubled
// n-1 times, capped at Max. For a pause whose exact length a caller
// shows or tests.
func (p Policy) Step(n int) time.Duration {
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

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
