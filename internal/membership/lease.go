package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
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

// Valid reports whether the silo may act as a member now: it has not
// fenced itself, and its last successful keepalive was sent less than
// FenceAfter ago (by the monotonic clock, so a pause counts). It turns
// false for a while when renewals fail past the bound (the silo is
// suspended, see the package doc) and true again when one succeeds.
func (m *Membership) Valid() bool {
	select {
	case <-m.fenced:
		return false
	default:
	}
	return clock.Since(m.clk, m.epoch) < time.Duration(m.validUntil.Load())
}

// WaitValid waits until the silo is Valid, and returns nil then; it returns
// Unavailable once the silo has fenced itself (for good), and the context's
// error if ctx ends first. A suspended silo (see the package doc) is valid
// again when a renewal succeeds and its record is still its own.
func (m *Membership) WaitValid(ctx context.Context) error {
	for {
		m.mu.Lock()
		renewed := m.renewed
		m.mu.Unlock()
		if m.Valid() {
			return nil
		}
		select {
		case <-renewed:
		case <-m.fenced:
			return errs.New(codes.Unavailable, "silo is fenced: it no longer serves activations (%w)", m.FenceCause())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Suspended reports whether the silo is suspended: past its fence bound
// without a successful renewal, not fenced. Turns wait meanwhile.
func (m *Membership) Suspended() bool {
	select {
	case <-m.fenced:
		return false
	default:
	}
	return m.started.Load() && !m.Valid()
}

// Health is what the silo knows of its own standing in the cluster, as
// its lease keepalives found it.
type Health struct {
	// EtcdFailing is when the keepalives began to fail, zero while the
	// last one succeeded; EtcdErr is the last failure.
	EtcdFailing time.Time
	EtcdErr     error
	// SuspendedAt is when the silo was suspended (see Suspended), zero
	// while it is not.
	SuspendedAt time.Time
	// Fenced is the cause of the silo's fencing, nil while it has not.
	Fenced error
}

// Health reports what the silo knows of its standing: whether etcd
// answers its keepalives, and since when not; whether it is suspended or
// fenced.
func (m *Membership) Health() Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := Health{EtcdFailing: m.etcdFailing, EtcdErr: m.etcdErr, SuspendedAt: m.suspendedAt, Fenced: m.fenceErr}
	if h.Fenced != nil {
		h.SuspendedAt = time.Time{}
	}
	return h
}

// noteKeepAlive records the outcome of a keepalive sent at now (err nil:
// it succeeded), and whether the silo is suspended, for Health.
func (m *Membership) noteKeepAlive(now time.Time, err error, suspendedAt time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.suspendedAt = suspendedAt
	if err == nil {
		m.etcdFailing, m.etcdErr = time.Time{}, nil
		return
	}
	if m.etcdFailing.IsZero() {
		m.etcdFailing = now
	}
	m.etcdErr = err
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

// keepAlive renews the lease every KeepAliveInterval, suspends the silo
// when no renewal succeeded within the fence bound and resumes it when one
// does, and fences it when the lease is gone, as described in the package
// doc. sent is when the lease grant was sent. Each success moves the bound
// to its send time plus the fence bound: the silo's FenceAfter, or less if
// etcd reports a shorter TTL than was asked.
func (m *Membership) keepAlive(sent time.Time) {
	defer m.wg.Done()
	interval := KeepAliveInterval(m.fenceAfter)
	retry := max(interval/4, 50*time.Millisecond)
	deadline := sent.Add(m.fenceAfter)
	suspended, suspendedAt := false, time.Time{}
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
		if !suspended && !now.Before(deadline) {
			suspended, suspendedAt = true, now
			m.suspensions.Add(1)
			m.log.Warn("suspended: no lease keepalive succeeded within the fence bound; turns wait until one does, and the silo fences if the lease is gone", "fence_bound", m.fenceAfter, "since", deadline, "lease", fmt.Sprintf("%x", int64(m.lease)))
		}
		// The call is bounded in durations, not instants: the clock may be
		// a test's. A call that hangs (etcd unreachable, its packets
		// dropped, a follower waiting for a new leader) must leave room for
		// the next attempts; one that is only slow (a loaded host) gets two
		// intervals.
		timeout := 2 * interval
		if !suspended {
			timeout = min(timeout, deadline.Sub(now))
		}
		ctx, cancel := context.WithTimeout(m.ctx, timeout)
		resp, err := m.client.KeepAliveOnce(ctx, m.lease)
		if err == nil && resp.TTL > 0 && suspended {
			err = m.checkRecord(ctx)
		}
		cancel()
		next := now.Add(interval)
		switch {
		case err == nil && resp.TTL > 0:
			bound := min(m.fenceAfter, LeaseBound(time.Duration(resp.TTL)*time.Second))
			if d := now.Add(bound); d.After(deadline) {
				deadline = d
			}
			m.validUntil.Store(int64(deadline.Sub(m.epoch)))
			if suspended {
				suspended = false
				m.log.Warn("resumed: a lease keepalive succeeded and the record is still this silo's", "suspended_for", m.clk.Now().Sub(suspendedAt), "lease", fmt.Sprintf("%x", int64(m.lease)))
			}
			m.noteKeepAlive(now, nil, time.Time{})
			m.signalRenewed()
		case m.ctx.Err() != nil:
			return
		case errors.Is(err, errRecordGone):
			m.fence(err)
			return
		case err == nil || isLeaseNotFound(err):
			if m.isLeaving() {
				return
			}
			m.fence(errors.New("the silo's lease was revoked or expired"))
			return
		default:
			if !suspended {
				m.log.Warn("lease keepalive failed", "err", err, "suspend_in", deadline.Sub(now))
			}
			at := time.Time{}
			if suspended {
				at = suspendedAt
			}
			m.noteKeepAlive(now, err, at)
			next = now.Add(retry)
		}
		if suspended {
			t.Reset(retry)
			continue
		}
		t.Reset(max(minTime(next, deadline).Sub(m.clk.Now()), 0))
	}
}

// errRecordGone fences a silo whose lease lived through a suspension but
// whose record did not (deleted by hand).
var errRecordGone = errors.New("the silo's record left etcd while the silo was suspended")

// checkRecord reads the silo's record (a linearizable read) before a
// suspended silo resumes: its lease lived, but the record may have been
// deleted meanwhile, which the watch has not told yet. It returns
// errRecordGone if the record is gone or under another lease.
func (m *Membership) checkRecord(ctx context.Context) error {
	resp, err := m.client.Get(ctx, m.key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(m.lease) {
		return errRecordGone
	}
	return nil
}

// signalRenewed wakes WaitValid.
func (m *Membership) signalRenewed() {
	m.mu.Lock()
	close(m.renewed)
	m.renewed = make(chan struct{})
	m.mu.Unlock()
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
