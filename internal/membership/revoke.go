package membership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"syscall"
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type revokeReq struct {
	lease  clientv3.LeaseID
	name   string
	reason string
	at     time.Time
	proven bool // the silo is certainly gone: revoke without a majority
}

func (m *Membership) enqueueRevoke(r revokeReq) {
	r.at = m.clk.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.revokeQ = append(m.revokeQ, r)
	m.mu.Unlock()
	select {
	case m.revokeC <- struct{}{}:
	default:
	}
}

// revokeLoop revokes the leases of silos gossip declared dead. A lease that
// is already gone is a success. Failures are retried until the lease must
// have expired anyway.
func (m *Membership) revokeLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.revokeC:
		}
		for {
			m.mu.Lock()
			if len(m.revokeQ) == 0 {
				m.mu.Unlock()
				break
			}
			r := m.revokeQ[0]
			m.revokeQ = m.revokeQ[1:]
			m.mu.Unlock()
			// Each on its own: one waiting for a healthy majority must not
			// hold up one that is proven.
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.revoke(r)
			}()
		}
	}
}

func (m *Membership) revoke(r revokeReq) {
	if !r.proven {
		// A death that gossip reports about an incarnation the silo
		// refutes (a restarted silo sees its predecessor's leave, and
		// answers it at once) is not a death: the refutation gets
		// revokeGrace to arrive.
		t := m.clk.NewTimer(revokeGrace)
		defer t.Stop()
	grace:
		for {
			m.mlMu.Lock()
			ch := m.gossipChanged
			m.mlMu.Unlock()
			if m.aliveUnder(r.name, r.lease) {
				m.log.Info("not removing a silo gossip declared dead: it is alive again", "member", r.name)
				return
			}
			select {
			case <-m.ctx.Done():
				return
			case <-ch:
			case <-t.C():
				break grace
			}
		}
	}
	if !r.proven {
		// A silo whose peer port refuses connections is probably gone: if
		// etcd shows its lease unrenewed too, prove it, so that its
		// addresses are taken over at once rather than after its fence.
		mi, ok := m.View().Member(r.name)
		if ok && mi.LeaseID == int64(r.lease) && m.awaitProof(mi) {
			r.proven = true
		}
		// A silo that no longer renews its lease (hung, or cut off from
		// etcd) is taken over sooner if its lease is left to expire than
		// if it is revoked, after which others wait for its fence.
		if !r.proven && ok && mi.LeaseID == int64(r.lease) && m.awaitExpiry(mi) {
			return
		}
	}
	b := retry.New(100*time.Millisecond, time.Second, m.clk)
	warned := false
	for {
		select {
		case <-m.fenced:
			return // a fenced silo removes no one
		default:
		}
		if !r.proven && m.aliveUnder(r.name, r.lease) {
			m.log.Info("not removing a silo gossip declared dead: it is alive again", "member", r.name)
			return
		}
		var err error
		if m.mayRevoke(r) {
			ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
			fence := m.fenceAfter
			if mi, ok := m.View().Member(r.name); ok && mi.LeaseID == int64(r.lease) {
				fence = fenceOf(mi, m.fenceAfter)
			}
			if err = m.recordRevocation(ctx, r.lease, r.name, fence); err == nil {
				_, err = m.client.Revoke(ctx, r.lease)
			}
			cancel()
			switch {
			case err == nil:
				m.log.Info("removed a silo from the view", "member", r.name, "reason", r.reason)
				return
			case isLeaseNotFound(err), m.ctx.Err() != nil:
				return
			}
		} else if !warned {
			warned = true
			m.log.Warn("not removing a silo gossip declared dead yet: this silo does not see a healthy majority of the view, so it may be the one cut off", "member", r.name)
		}
		// Leases are at most a few TTLs long; past that it has expired.
		if clock.Since(m.clk, r.at) > 2*m.cfg.LeaseTTL {
			m.log.Warn("gave up removing a dead silo; its lease expires by itself", "member", r.name, "err", err)
			return
		}
		if !b.Wait(m.ctx, nil) {
			return
		}
	}
}

// Suspect is told that the silo-to-silo stream to peerAddr broke. If a
// member of the view has that peer address and it is proven dead (its peer
// port refuses connections and etcd shows its lease unrenewed; see
// ProvenDead), its lease is revoked, without waiting for a healthy
// majority. A reset alone is not enough: that member is left to gossip
// detection, and its addresses to its fence.
func (m *Membership) Suspect(peerAddr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.suspects[peerAddr] {
		return
	}
	var target Member
	for _, mi := range m.view.Members {
		if mi.PeerAddr == peerAddr && mi.Name != m.cfg.Name {
			target = mi
		}
	}
	if target.Name == "" {
		return
	}
	if m.suspects == nil {
		m.suspects = make(map[string]bool)
	}
	m.suspects[peerAddr] = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		dead := m.awaitProof(target)
		m.mu.Lock()
		delete(m.suspects, peerAddr)
		m.mu.Unlock()
		if dead {
			m.enqueueRevoke(revokeReq{lease: clientv3.LeaseID(target.LeaseID), name: target.Name, reason: "its peer port refuses connections and its lease is no longer renewed", proven: true})
		}
	}()
}

// awaitProof checks, while target's record is in the view and its peer
// port refuses connections, whether its lease has stopped being renewed:
// until it is proven dead (true, with the proof written), or until it no
// longer refuses, leaves the view, or has certainly fenced anyway.
func (m *Membership) awaitProof(target Member) bool {
	lease := clientv3.LeaseID(target.LeaseID)
	if lease == 0 || target.PeerAddr == "" {
		return false
	}
	limit := m.clk.NewTimer(fenceOf(target, m.fenceAfter))
	defer limit.Stop()
	warned := proof(-1) // what was logged last
	for {
		if mi, in := m.View().Member(target.Name); !in || mi.LeaseID != target.LeaseID {
			return false
		}
		if !Refused(m.ctx, target.PeerAddr) {
			return false
		}
		p := m.unrenewed(m.ctx, lease, fenceOf(target, m.fenceAfter))
		switch p {
		case proofYes:
			m.recordProof(lease, target.Name)
			return true
		case proofGone:
			return false
		}
		if warned != p {
			warned = p
			// Say what is known: etcd's answer, or that there was none.
			if p == proofUnknown {
				m.log.Warn("a member's peer port refuses connections, and etcd does not answer: whether its lease is still renewed is unknown, so no proof of death yet", "member", target.Name)
			} else {
				m.log.Warn("a member's peer port refuses connections, but its lease is still renewed: no proof of death yet", "member", target.Name)
			}
		}
		t := m.clk.NewTimer(250 * time.Millisecond)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return false
		case <-limit.C():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// awaitExpiry waits for the lease of target, which gossip declared dead, to
// expire, while that comes soon (maxExpiryWait) and sooner than its fence
// after a revocation would, and the lease is not renewed: etcd reports
// (whole seconds, rounded down) at least two seconds less than granted,
// so it went unrenewed for more than a second, where a silo that runs and
// reaches etcd renews it every KeepAliveInterval; its remaining TTL, plus a
// second of rounding and etcd's half-second expiry check, is below both
// bounds. It returns true once the lease is gone; false (revoke it) when
// it is renewed, or expires later: a revocation moves the view at once, so
// that a long lease does not keep a dead member in the view.
func (m *Membership) awaitExpiry(target Member) bool {
	lease := clientv3.LeaseID(target.LeaseID)
	fence := fenceOf(target, m.fenceAfter)
	waited := false
	var recent time.Time // when the lease was first seen just renewed
	prevTTL := int64(-1)
	for {
		select {
		case <-m.fenced:
			return true // a fenced silo removes no one
		default:
		}
		ctx, cancel := context.WithTimeout(m.ctx, time.Second)
		r, err := m.client.TimeToLive(ctx, lease)
		cancel()
		switch {
		case (err != nil && isLeaseNotFound(err)) || (err == nil && r.TTL <= 0):
			return true
		case err != nil:
			return false
		}
		left := time.Duration(r.TTL)*time.Second + 1500*time.Millisecond
		if r.TTL > r.GrantedTTL-2 {
			// Renewed within the last second or two: gossip may have
			// declared the member dead just after its last renewal. Look
			// again for a moment: a lease whose TTL goes up again is
			// renewed (revoke it); one that is not renewed comes below
			// GrantedTTL-2 within two seconds and is judged as below.
			if recent.IsZero() {
				recent = m.clk.Now()
			}
			if (prevTTL >= 0 && r.TTL > prevTTL) || clock.Since(m.clk, recent) > recentRenewalWait {
				return false
			}
			prevTTL = r.TTL
			if !m.pause(250 * time.Millisecond) {
				return true
			}
			continue
		}
		if left >= fence || left > maxExpiryWait {
			return false
		}
		if !waited {
			waited = true
			m.log.Info("a member gossip declared dead no longer renews its lease: leaving the lease to expire, which is sooner than its fence after a revocation", "member", target.Name, "lease_ttl_left", time.Duration(r.TTL)*time.Second)
		}
		t := m.clk.NewTimer(250 * time.Millisecond)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return true
		case <-t.C():
		}
	}
}

// recentRenewalWait bounds how long awaitExpiry watches a lease that was
// renewed just before gossip declared its member dead, to tell a renewal
// that goes on from the last one before a crash.
const recentRenewalWait = 3 * time.Second

// pause waits d on the membership's clock: false if the membership closed
// meanwhile.
func (m *Membership) pause(d time.Duration) bool {
	t := m.clk.NewTimer(d)
	select {
	case <-m.ctx.Done():
		t.Stop()
		return false
	case <-t.C():
		return true
	}
}

// maxExpiryWait bounds how long a member gossip declared dead is left in the
// view for its lease to expire (see awaitExpiry).
const maxExpiryWait = 10 * time.Second

// recordRevocation writes, before a revocation by detection, that lease is
// revoked, under <prefix>revoked/<lease in hex>, bound to a lease of its
// own of a minute, or three times the revoked silo's fence bound if that is
// longer: a silo that sees the record go reads it (expired) and waits for
// the silo's fence, where an expiry lets it take over at once. So the
// record outlives the revocation's call (3 s at most) by more than the
// fence: a silo that finds no record of a departure it saw late (its
// watch broke meanwhile) knows the departure is older than the fence.
func (m *Membership) recordRevocation(ctx context.Context, lease clientv3.LeaseID, name string, fence time.Duration) error {
	g, err := m.client.Grant(ctx, max(revokedTTL, int64(3*fence/time.Second)+1))
	if err != nil {
		return err
	}
	_, err = m.client.Put(ctx, m.revokedKey(lease), name, clientv3.WithLease(g.ID))
	return err
}

// revokedTTL is the least TTL, in seconds, of the records of revocations.
const revokedTTL = 60

func (m *Membership) revokedKey(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%srevoked/%x", m.cfg.Prefix, int64(lease))
}

type proof int

const (
	proofNo      proof = iota // renewed recently
	proofYes                  // not renewed for longer than the silo's fence bound
	proofGone                 // the lease is gone (revoked or expired)
	proofUnknown              // etcd did not answer
)

// unrenewed asks etcd whether lease, of a silo with fence bound fence, has
// gone unrenewed for longer than that bound (and 1% for the rate of that
// silo's clock): its remaining TTL (whole seconds, rounded down, so one
// more second is allowed for) is that far below its granted TTL. The silo
// then runs no turn (it is suspended: see the package doc) even if it is
// alive and only cut off, from its peers by resets and from etcd at once,
// which a refused port alone cannot tell from death. (Two keepalive
// intervals, as this was before, let a silo cut off from everything be
// taken over while it still served.)
func (m *Membership) unrenewed(ctx context.Context, lease clientv3.LeaseID, fence time.Duration) proof {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := m.client.TimeToLive(ctx, lease)
	switch {
	case err != nil && isLeaseNotFound(err):
		return proofGone
	case err != nil:
		return proofUnknown
	case r.TTL < 0:
		return proofGone // etcd answers -1 for a lease it does not know
	}
	// A TTL of 0 is a lease that lives less than a second more.
	since := time.Duration(r.GrantedTTL-r.TTL)*time.Second - time.Second
	if since > fence+fence/fenceDriftDivisor {
		return proofYes
	}
	return proofNo
}

// recordProof writes that the silo of lease is proven dead, under
// <prefix>dead/<lease in hex>, bound to this silo's lease: the others read
// it (ProvenDead) once the lease is gone and can no longer be asked.
func (m *Membership) recordProof(lease clientv3.LeaseID, name string) {
	ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
	defer cancel()
	if _, err := m.client.Put(ctx, m.proofKey(lease), name, clientv3.WithLease(m.lease)); err != nil {
		m.log.Warn("could not record a proof of death", "member", name, "err", err)
		return
	}
	m.mu.Lock()
	m.proven[lease] = true
	m.mu.Unlock()
}

func (m *Membership) proofKey(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%sdead/%x", m.cfg.Prefix, int64(lease))
}

// ProvenDead reports whether the process of the departed member d is
// certainly gone, so that its addresses may be taken over before its fence.
// Two independent signals must have agreed while its lease still existed:
// its peer port refused connections (Refused), and etcd showed its lease
// unrenewed for longer than its fence bound (so it runs no turn even if it
// is alive and cut off from everything). The silo that saw both
// recorded the proof in etcd before it revoked the lease; ProvenDead reads
// it. A TCP reset alone (a firewall, or a peer listener that failed in a
// process that still holds its lease) proves nothing, and neither does
// gossip: a firewall that rejects everything makes gossip declare a live
// silo dead.
func (m *Membership) ProvenDead(ctx context.Context, d Departure) bool {
	if d.Name == m.cfg.Name || d.Lease == 0 {
		return false
	}
	m.mu.Lock()
	proven := m.proven[d.Lease]
	m.mu.Unlock()
	if proven {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := m.client.Get(ctx, m.proofKey(d.Lease), clientv3.WithCountOnly())
	return err == nil && r.Count > 0
}

// revokeGrace is how long a silo waits, after gossip declared another dead,
// before it removes it.
const revokeGrace = 500 * time.Millisecond

// aliveUnder reports whether gossip lists name as alive with lease.
func (m *Membership) aliveUnder(name string, lease clientv3.LeaseID) bool {
	m.mlMu.Lock()
	defer m.mlMu.Unlock()
	return m.alive[name] != "" && m.known[name] == lease
}

// mayRevoke reports whether this silo may remove the silo of r from the view:
// only while it sees a majority of the view alive in gossip, itself
// included, and is healthy itself, or when that silo is proven gone (restarted under a new lease, or
// ProvenDead). So a silo that is cut off from its
// peers, but not from etcd, never removes the healthy majority; the majority
// removes it instead, and it fences itself.
func (m *Membership) mayRevoke(r revokeReq) bool {
	if r.proven {
		return true
	}
	m.mlMu.Lock()
	ml := m.ml
	alive := maps.Clone(m.alive)
	m.mlMu.Unlock()
	v := m.View()
	n := 0
	for _, mi := range v.Members {
		if mi.Name == m.cfg.Name || (mi.Name != r.name && alive[mi.Name] != "") {
			n++
		}
	}
	// Lifeguard's health score rises when this silo's own probes go
	// unanswered even by the peers asked to probe indirectly: the sign of
	// a silo that is cut off itself.
	if 2*n > len(v.Members) && ml != nil && ml.GetHealthScore() == 0 {
		return true
	}
	return false
}

// Refused reports whether a TCP connection to addr is refused (a reset):
// nothing listens on the port, or a firewall rejects the connection. It is
// one of the two signals of ProvenDead, never a proof of death alone.
func Refused(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
