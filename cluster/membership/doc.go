// Package membership is a silo's place in the cluster: who the members are
// (the view), how a dead member is noticed and removed, and when a member
// must stop serving (fencing). The silo (package cluster) makes one
// Membership, routes by its views and asks it, before every takeover, whether
// the previous owner of an address can still be serving.
//
// Files: config.go (Config and defaults), view.go (Member records and
// View), membership.go (New, Start, Leave, Close), watch.go (the view, kept
// from etcd), lease.go (the lease, keepalives and fencing), gossip.go
// (memberlist), revoke.go (removing dead members).
//
// # Two layers
//
// Authority is in etcd. Each silo writes its record (Member) under
// <prefix>members/<name>, bound to an etcd lease of its own. The view is the
// set of records; its Version is the etcd revision that produced it, so silos
// that saw the same changes agree on it, and one silo's versions only grow.
//
// Detection is hashicorp/memberlist (SWIM with Lifeguard). Each silo gossips
// its lease ID. When gossip declares a silo dead, survivors revoke exactly
// that lease, so its record leaves the view long before the lease would
// expire; a restarted silo has a new lease and is never hit by a revocation
// meant for its predecessor.
//
// # Who may remove whom
//
// A survivor revokes a dead silo's lease only while it sees a healthy
// majority of the view alive in gossip (itself included, Lifeguard health
// score 0), after a grace of 500 ms in which the silo may show alive again.
// A silo cut off from its peers but not from etcd therefore never removes the
// others; the majority removes it. Without a majority, a silo is removed on
// proof of death: its peer port refuses connections (Refused), or gossip
// shows it back under a new lease.
//
// # Fencing
//
// A silo fences itself (Fenced is closed, Valid turns false) when a
// keepalive says its lease is gone, when its record leaves the view without
// Leave, or when no keepalive has succeeded for FenceAfter (default a third
// of the lease TTL). The bound: the silo notes time s before it sends a
// keepalive; if it succeeds, etcd renewed the lease after s, so the lease
// lives until s+TTL at least. The silo stops at (last good s)+FenceAfter,
// before that. Valid checks this on the monotonic clock at every turn, so a
// silo paused past its fence (SIGSTOP, a long GC) runs nothing when it
// resumes. Hence TakeoverAt: a member removed without Leave is certainly
// fenced FenceAfter (its own, from its record) after its removal was seen.
// A fenced Membership is final; the silo exits and comes back as a new
// incarnation.
//
// # Leaving
//
// MarkLeaving marks the record leaving (it owns no addresses from then on);
// Leave revokes the lease and leaves gossip, so others take over at once.
//
// Time comes from Config.Clock, so tests drive keepalives and fencing with
// a fake clock.
package membership
