// Package membership is a silo's place in the cluster: who the members are
// (the view), how a dead member is noticed and removed, and when a member
// must stop serving (fencing). The silo (package cluster) makes one
// Membership, routes by its views and asks it, before every takeover, whether
// the previous owner of an address can still be serving.
//
// Files: config.go (Config and defaults), view.go (Member records and
// View), membership.go (New, Start, Leave, Close), watch.go (the view, kept
// from etcd), lease.go (the lease, keepalives and fencing), gossip.go
// (memberlist), revoke.go (removing dead members), security.go (keeping
// out members whose security settings differ), unreachable.go (members the
// others cannot reach, which take themselves out of placement).
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
// A silo is suspended (Valid turns false, Suspended true) when no
// keepalive has succeeded within the fence bound (FenceAfter) after the
// last successful one was sent: its lease may have expired. A suspended
// silo runs no turn (turns wait, WaitValid) and goes on renewing. If a
// renewal succeeds and its record is still its own (a linearizable read),
// the lease lived through the suspension, so no one took its addresses
// over (a takeover needs the lease expired or revoked, and neither lease
// can be renewed again): it serves again, with the turns that waited. A
// silo fences itself (Fenced is closed, Valid turns false for good) when a
// keepalive says its lease is gone, or when its record leaves the view
// without Leave.
//
// Suspending instead of fencing is what makes a short TTL safe against
// etcd: a leader election or an etcd outage that outlasts the bound only
// delays turns (an Ask waits within its deadline), while a silo whose
// lease really expired (cut off from a working etcd for a TTL, or hung)
// finds its lease gone when it next reaches etcd, and fences.
//
// The bound is the time the lease can really last. The silo notes time s
// (its monotonic clock) before it sends a keepalive. If the keepalive
// succeeds, the etcd leader renewed the lease after s, to its full TTL, so
// the lease lives until s+TTL at least by the leader's clock: a leader
// change only extends leases (the new leader restarts every lease's TTL,
// plus an election timeout, when it takes over), and a lease is revoked
// only by its silo's Leave or by another silo's detection, which the silo
// learns from its next keepalive or its view. So the silo may serve until
// s+LeaseBound(TTL): TTL less 1% for the rate of its clock against the
// leader's, and 250 ms of slack (1.73 s for the default TTL of 2 s). TTL
// is what the silo asked (whole seconds), or less if a keepalive reports
// less. Keepalives go every KeepAliveInterval (a sixth of the bound, at
// most 1 s: 288 ms by default) and a failed one is retried at a quarter of
// that, each call bounded (two intervals) so that one that hangs leaves
// room for the next. Config.FenceAfter may only shorten the bound.
//
// Valid checks the bound on the monotonic clock at every turn, so a silo
// paused past its bound (SIGSTOP, a long GC) runs nothing when it resumes
// until a renewal succeeds. Hence TakeoverAt. A member whose lease expired
// is certainly not serving: its last successful keepalive was sent before
// the renewal that set the expiry, TTL before it (by the leader's clock),
// and it suspended LeaseBound(TTL) after that send, before the expiry,
// which comes before anyone sees it, and it can never renew again; its
// addresses are taken over at once. A member removed otherwise without
// Leave (its lease revoked by detection) is certainly not serving
// FenceAfter (its own, from its record) after its removal was seen, since
// its last successful keepalive was sent before the removal.
//
// A silo tells an expiry from a revocation by a record: every revocation
// by detection first writes <prefix>revoked/<lease>, bound to a lease of
// its own of a minute or more, and a silo that sees a record deleted reads, at the
// deletion's revision, whether that was written; if not, and etcd no
// longer knows the lease, the lease expired. A record deleted by hand
// (its lease alive) or etcd not answering counts as a revocation. A lease
// revoked by hand (etcdctl lease revoke) is taken for an expiry: do not
// revoke a live silo's lease by hand; delete its record instead.
//
// A silo that gossip declares dead but that no longer renews its lease
// (hung, paused, or cut off from etcd as well) is therefore not revoked
// while its lease expires within 10 s and sooner than its fence after a
// revocation would end: survivors leave the lease to expire, and a hung
// silo is taken over about one TTL after it hung (2 s by default). A silo
// that still renews its lease (cut off from its peers only) is revoked,
// and taken over gossip detection plus its fence bound after it was cut
// off.
//
// A fenced Membership is final. The silo program (cluster.Program) tears
// the silo down without running OnDeactivate and starts a new one, with a
// new Membership and a new lease, which joins once etcd answers and the old
// record is gone.
//
// # Proof of death
//
// A removed member's addresses may be taken over before its fence only if
// its process is proven gone by two signals, both seen while its lease
// still existed: its peer port refuses connections (Refused: a TCP reset),
// and etcd shows its lease unrenewed for longer than its fence bound
// (remaining TTL, in whole seconds, plus one second, that far below the
// granted TTL), past which a silo that did not renew is suspended even if
// it is alive and only cut off. The silo that sees both writes the proof
// under <prefix>dead/<lease> and then revokes the lease; every silo's
// takeover reads the proof (ProvenDead). A reset alone proves nothing: a
// firewall may answer with resets, or the peer listener may have failed
// in a process that still holds its lease and serves. Gossip proves
// nothing either: a firewall that rejects everything makes SWIM declare a
// live silo dead. A lease unrenewed for less than the fence bound proves
// nothing either: a silo cut off by resets from its peers and from etcd at
// once still serves its clients until its bound (the chaos program found
// this when the threshold was two keepalive intervals). Because etcd
// reports whole seconds, the proof needs a fence bound at least a second
// and a half shorter than the TTL (Config.FenceAfter); with the default
// bound (the TTL less 1% and 250 ms) a killed silo is taken over when its
// lease expires, a TTL after its last renewal (about 2 s by default).
//
// # Leaving
//
// MarkLeaving marks the record leaving (it owns no addresses from then on);
// Leave revokes the lease and leaves gossip, so others take over at once.
//
// Time comes from Config.Clock, so tests drive keepalives and fencing with
// a fake clock.
package membership
