package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Pending lists the departures whose takeover time is still ahead.
func (m *Membership) Pending() []Departure {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	var out []Departure
	for name, d := range m.departed {
		if _, in := m.view.Member(name); in && name != m.cfg.Name {
			continue
		}
		if at := d.at.Add(d.fence); !d.graceful && !d.expired && at.After(now) {
			out = append(out, Departure{Name: name, PeerAddr: d.peer, Lease: d.lease, At: at})
		}
	}
	return out
}

// Fenced is closed when the silo can no longer be sure it holds its lease.
// From then on it must not serve activations; see Membership. It is never
// closed by Leave or Close.
func (m *Membership) Fenced() <-chan struct{} { return m.fenced }

// Valid reports whether the silo may still act as a member: it has not
// fenced itself, and its last successful keepalive was sent less than
// FenceAfter ago (by the monotonic clock, so a pause counts).
func (m *Membership) Valid() bool {
	select {
	case <-m.fenced:
		return false
	default:
	}
	return clock.Since(m.clk, m.epoch) < time.Duration(m.validUntil.Load())
}

// FenceCause says why the silo fenced itself, nil while it has not.
func (m *Membership) FenceCause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenceErr
}

// TakeoverAt returns when another silo may start activations of addresses
// that the member name owned: the time its removal was observed for a member
// that left with Leave or whose lease expired (it fenced before the expiry),
// that time plus the member's FenceAfter for one removed otherwise (when it
// is certainly fenced), and now plus this silo's FenceAfter for a name this
// silo never saw leave. ok is false while name is in the view.
func (m *Membership) TakeoverAt(name string) (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, in := m.view.Member(name); in {
		return time.Time{}, false
	}
	d, seen := m.departed[name]
	switch {
	case !seen:
		return m.clk.Now().Add(m.fenceAfter), true
	case d.graceful, d.expired:
		return d.at, true
	default:
		return d.at.Add(d.fence), true
	}
}

func (m *Membership) fence(cause error) {
	m.fenceOnce.Do(func() {
		m.mu.Lock()
		m.fenceErr = cause
		m.mu.Unlock()
		m.log.Error("fenced: this silo can no longer be sure it holds its lease and must stop serving activations", "cause", cause)
		close(m.fenced)
	})
}

func (m *Membership) isLeaving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaving
}

// keepAlive renews the lease every KeepAliveInterval and fences the silo
// as described in the package doc. sent is when the lease grant was sent.
// Each success moves the fence to its send time plus the bound: the silo's
// FenceAfter, or less if etcd reports a shorter TTL than was asked.
func (m *Membership) keepAlive(sent time.Time) {
	defer m.wg.Done()
	interval := KeepAliveInterval(m.fenceAfter)
	retry := max(interval/4, 50*time.Millisecond)
	deadline := sent.Add(m.fenceAfter)
	t := m.clk.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C():
		}
		if m.isLeaving() {
			return
		}
		now := m.clk.Now()
		if !now.Before(deadline) {
			m.fence(fmt.Errorf("no lease keepalive succeeded in time: the lease may have expired (fence bound %v after the last successful keepalive was sent)", m.fenceAfter))
			return
		}
		// The call is bounded in durations, not instants: the clock may be
		// a test's. A call that hangs (etcd unreachable, its packets
		// dropped, a follower waiting for a new leader) must leave room for
		// the next attempts; one that is only slow (a loaded host) gets two
		// intervals.
		ctx, cancel := context.WithTimeout(m.ctx, min(2*interval, deadline.Sub(now)))
		resp, err := m.client.KeepAliveOnce(ctx, m.lease)
		cancel()
		next := now.Add(interval)
		switch {
		case err == nil && resp.TTL > 0:
			bound := min(m.fenceAfter, LeaseBound(time.Duration(resp.TTL)*time.Second))
			if d := now.Add(bound); d.After(deadline) {
				deadline = d
			}
			m.validUntil.Store(int64(deadline.Sub(m.epoch)))
		case m.ctx.Err() != nil:
			return
		case err == nil || isLeaseNotFound(err):
			if m.isLeaving() {
				return
			}
			m.fence(errors.New("the silo's lease was revoked or expired"))
			return
		default:
			m.log.Warn("lease keepalive failed", "err", err, "fence_in", deadline.Sub(now))
			next = now.Add(retry)
		}
		t.Reset(max(minTime(next, deadline).Sub(m.clk.Now()), 0))
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)
}

func fenceOf(mi Member, dflt time.Duration) time.Duration {
	if mi.FenceAfter > 0 {
		return mi.FenceAfter
	}
	return dflt
}
