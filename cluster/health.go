package cluster

import (
	"fmt"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/membership"
)

// notReady says why the silo is not ready to serve, "" if it is: what
// /readyz answers with 503. A silo is ready when its gateway takes calls,
// it is in the view and serves activations, and its lease keepalives reach
// etcd; suspended, fenced or cut off from etcd, it is not, and says since
// when.
func (s *Silo) notReady() string {
	if s.gw.Draining() {
		return "the gateway is shutting down"
	}
	h := s.members.Health()
	now := s.clk.Now()
	if h.Fenced != nil {
		return fenceReason(h.Fenced)
	}
	if !h.SuspendedAt.IsZero() {
		return fmt.Sprintf("suspended %s: no lease keepalive succeeded within the fence bound, so turns wait (last error: %v)", since(h.SuspendedAt, now), h.EtcdErr)
	}
	if !h.EtcdFailing.IsZero() {
		return fmt.Sprintf("etcd unreachable %s: %v", since(h.EtcdFailing, now), h.EtcdErr)
	}
	if s.members.Unreachable() {
		return "unreachable: the other silos report that they cannot reach this silo's peer port (" + s.members.Self().PeerAddr + "), so it takes no agents; restart it once they can"
	}
	if st := s.router.state.Load(); !st.self {
		return "not serving activations (leaving, or not in the view)"
	}
	return ""
}

// fenceReason says that the silo fenced, and why: "fenced: <cause>".
func fenceReason(cause error) string {
	if cause == nil {
		return "fenced"
	}
	return "fenced: " + cause.Error()
}

// since says when t was and how long ago, as of now.
func since(t, now time.Time) string {
	return fmt.Sprintf("since %s (%v)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// memberState is what `members` says of member mi (self: this silo) as
// this silo knows it: alive or leaving as the view says while etcd
// answers; while it does not, what is known and since when.
func memberState(h membership.Health, clk clock.Clock, mi membership.Member, self bool) string {
	state := "alive"
	switch {
	case mi.Unreachable && mi.Drained:
		state = "unreachable (drained): the others cannot reach its peer port; it runs no agents"
	case mi.Unreachable:
		state = "unreachable (draining): the others cannot reach its peer port; it takes no agents"
	}
	if mi.Leaving {
		state = "leaving"
	}
	now := clk.Now()
	switch {
	case h.Fenced != nil && self:
		return "fenced: " + h.Fenced.Error()
	case h.Fenced != nil:
		return "unknown: this silo is fenced"
	case !h.SuspendedAt.IsZero() && self:
		return "suspended " + since(h.SuspendedAt, now) + ": etcd unreachable"
	case h.EtcdFailing.IsZero():
		return state
	case self:
		return state + ", etcd unreachable " + since(h.EtcdFailing, now)
	default:
		return "unknown: etcd unreachable " + since(h.EtcdFailing, now) + " (" + state + " in the last view)"
	}
}

// cutOff reports, and logs, whether the silo's lease keepalives no longer
// reach etcd as it stops: it then cannot leave the cluster (mark its
// record leaving, revoke its lease), and does not try.
func (s *Silo) cutOff() bool {
	h := s.members.Health()
	if h.EtcdFailing.IsZero() {
		return false
	}
	s.logger.Warn("stopping without leaving the cluster: etcd unreachable "+since(h.EtcdFailing, s.clk.Now())+"; the other silos take this silo's agents over once its lease expires", "err", h.EtcdErr)
	return true
}
