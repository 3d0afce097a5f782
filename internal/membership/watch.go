package membership

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// Subscribe returns a channel that receives the current view at once and
// then every newer view. It holds one view: a subscriber that reads slowly
// skips intermediate views and always receives the newest, never an older one
// after a newer. Views are sent from the membership's watcher without
// blocking it. The channel is closed by cancel or Close; cancel may be called
// more than once.
func (m *Membership) Subscribe() (views <-chan View, cancel func()) {
	ch := make(chan View, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		close(ch)
		return ch, func() {}
	}
	id := m.nextSub
	m.nextSub++
	m.subs[id] = ch
	ch <- m.view
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c, ok := m.subs[id]; ok {
			delete(m.subs, id)
			close(c)
		}
	}
}

// watchLoop keeps the view: read the records, watch from there, and read
// again when the watch breaks.
func (m *Membership) watchLoop() {
	defer m.wg.Done()
	b := retry.New(100*time.Millisecond, 2*time.Second, m.clk)
	for {
		err := m.watchOnce()
		if m.ctx.Err() != nil {
			return
		}
		m.log.Debug("membership watch broke; re-reading", "err", err)
		if !b.Wait(m.ctx, nil) {
			return
		}
	}
}

func (m *Membership) watchOnce() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
	defer cancel()
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := m.client.Get(gctx, m.dir, clientv3.WithPrefix())
	gcancel()
	if err != nil {
		return err
	}
	members := make(map[string]Member, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if mi, ok := m.decode(kv); ok && m.admit(mi) {
			members[mi.Name] = mi
		}
	}
	// Only this loop changes the view: the members missing from the read
	// are those that departed.
	expired := map[clientv3.LeaseID]bool{}
	for _, mi := range m.View().Members {
		if _, ok := members[mi.Name]; !ok && !mi.Leaving && mi.Name != m.cfg.Name {
			expired[clientv3.LeaseID(mi.LeaseID)] = m.expired(ctx, clientv3.LeaseID(mi.LeaseID), resp.Header.Revision)
		}
	}
	m.replace(members, resp.Header.Revision, expired)
	wch := m.client.Watch(ctx, m.dir, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			m.apply(wr.Events, m.expiries(ctx, wr.Events))
		}
	}
	return errors.New("watch closed")
}

func (m *Membership) decode(kv *mvccpb.KeyValue) (Member, bool) {
	var mi Member
	name := strings.TrimPrefix(string(kv.Key), m.dir)
	if err := json.Unmarshal(kv.Value, &mi); err != nil || mi.Name != name {
		m.log.Warn("ignoring a malformed member record", "key", string(kv.Key), "err", err)
		return Member{}, false
	}
	return mi, true
}

// expiries tells, for each member record that events delete without its
// silo leaving, whether the lease expired (see expired).
func (m *Membership) expiries(ctx context.Context, events []*clientv3.Event) map[clientv3.LeaseID]bool {
	out := map[clientv3.LeaseID]bool{}
	for _, ev := range events {
		if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil {
			continue
		}
		var prev Member
		if json.Unmarshal(ev.PrevKv.Value, &prev) != nil || prev.Leaving || prev.LeaseID == 0 || prev.Name == m.cfg.Name {
			continue
		}
		out[clientv3.LeaseID(prev.LeaseID)] = m.expired(ctx, clientv3.LeaseID(prev.LeaseID), ev.Kv.ModRevision)
	}
	return out
}

// expired reports whether the record of a silo with lease, deleted at
// revision rev, went because the lease expired: no silo recorded a
// revocation of it (revoked/<lease>, written before any revocation by
// detection, bound to a lease that outlives every fence) at rev, and the
// lease is gone. A silo fences itself before its lease can expire (see
// the package doc), so its addresses may be taken over at once. Anything
// else (a revocation, a record deleted by hand while its lease lives,
// etcd not answering) is not taken for an expiry: takeover then waits
// for the silo's fence.
func (m *Membership) expired(ctx context.Context, lease clientv3.LeaseID, rev int64) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := m.client.Get(ctx, m.revokedKey(lease), clientv3.WithRev(rev), clientv3.WithCountOnly())
	if err != nil || r.Count > 0 {
		return false
	}
	t, err := m.client.TimeToLive(ctx, lease)
	if err != nil {
		return isLeaseNotFound(err)
	}
	return t.TTL < 0 // etcd answers -1 for a lease it does not know; 0 lives on
}

// replace sets the members read at revision rev; expired says which of the
// departed members' leases expired.
func (m *Membership) replace(members map[string]Member, rev int64, expired map[clientv3.LeaseID]bool) {
	m.mu.Lock()
	old := m.current()
	if m.loaded && reflect.DeepEqual(old, members) {
		m.mu.Unlock()
		return
	}
	now := m.clk.Now()
	for name, mi := range old {
		if _, ok := members[name]; !ok {
			lease := clientv3.LeaseID(mi.LeaseID)
			m.departed[name] = departure{at: now, graceful: mi.Leaving, expired: expired[lease], fence: fenceOf(mi, m.fenceAfter), peer: mi.PeerAddr, lease: lease}
			m.logDeparture(name, expired[lease])
		}
	}
	m.publish(members, max(rev, m.view.Version))
}

func (m *Membership) logDeparture(name string, expired bool) {
	if expired {
		m.log.Info("a member's lease expired: it fenced itself before, its addresses are taken over at once", "member", name)
	}
}

// apply applies watch events; expired says which of the deleted records'
// leases expired.
func (m *Membership) apply(events []*clientv3.Event, expired map[clientv3.LeaseID]bool) {
	m.mu.Lock()
	members := m.current()
	now := m.clk.Now()
	var rev int64
	for _, ev := range events {
		rev = ev.Kv.ModRevision
		name := strings.TrimPrefix(string(ev.Kv.Key), m.dir)
		switch ev.Type {
		case clientv3.EventTypePut:
			if mi, ok := m.decode(ev.Kv); ok && m.admit(mi) {
				members[name] = mi
			} else {
				delete(members, name)
			}
		case clientv3.EventTypeDelete:
			if _, ok := members[name]; !ok && m.wasRefused(ev.PrevKv) {
				continue // never in the view: no departure
			}
			d := departure{at: now, fence: m.fenceAfter}
			if old, ok := members[name]; ok {
				d.fence = fenceOf(old, m.fenceAfter)
				d.graceful = old.Leaving
				d.peer = old.PeerAddr
				d.lease = clientv3.LeaseID(old.LeaseID)
			}
			if ev.PrevKv != nil {
				var prev Member
				if json.Unmarshal(ev.PrevKv.Value, &prev) == nil {
					d.graceful = prev.Leaving
					d.fence = fenceOf(prev, m.fenceAfter)
					d.peer = prev.PeerAddr
					d.lease = clientv3.LeaseID(prev.LeaseID)
				}
			}
			d.expired = !d.graceful && expired[d.lease]
			m.logDeparture(name, d.expired)
			m.departed[name] = d
			delete(members, name)
		}
	}
	m.publish(members, max(rev, m.view.Version))
}

// current returns a copy of the members as a map; m.mu held.
func (m *Membership) current() map[string]Member {
	cur := make(map[string]Member, len(m.view.Members))
	for _, mi := range m.view.Members {
		cur[mi.Name] = mi
	}
	return cur
}

// publish installs a new view and tells subscribers; m.mu held, released.
func (m *Membership) publish(members map[string]Member, version int64) {
	v := View{Version: version, Members: make([]Member, 0, len(members))}
	for _, mi := range members {
		v.Members = append(v.Members, mi)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].Name < v.Members[j].Name })
	m.view = v
	m.loaded = true
	close(m.changed)
	m.changed = make(chan struct{})
	for _, c := range m.subs {
		select {
		case <-c:
		default:
		}
		c <- v
	}
	// Departures are remembered for a while: TakeoverAt is asked right after
	// a view change.
	for name, d := range m.departed {
		if clock.Since(m.clk, d.at) > 10*time.Minute+d.fence {
			delete(m.departed, name)
		}
	}
	var cause error
	if m.lease != 0 {
		mi, in := v.Member(m.cfg.Name)
		mine := in && mi.LeaseID == int64(m.lease)
		switch {
		case mine:
			m.selfSeen = true
		case m.selfSeen && !m.leaving:
			cause = errors.New("the silo's record left the membership view")
		}
	}
	m.mu.Unlock()
	if cause != nil {
		m.fence(cause)
	}
}

// waitLoaded waits for the first read of the view.
func (m *Membership) waitLoaded(ctx context.Context) error {
	return m.waitFor(ctx, func() bool { return m.loaded })
}

// waitView waits until cond holds for the view.
func (m *Membership) waitView(ctx context.Context, cond func(View) bool) error {
	return m.waitFor(ctx, func() bool { return cond(m.view) })
}

// waitFor waits until cond (called with m.mu held) holds, the membership
// fences or ctx ends.
func (m *Membership) waitFor(ctx context.Context, cond func() bool) error {
	for {
		m.mu.Lock()
		done, ch := cond(), m.changed
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-m.fenced:
			return errs.New(codes.Unavailable, "membership: fenced while joining: %w", m.FenceCause())
		case <-ctx.Done():
			return etcderr.FromCall(ctx, ctx.Err(), "membership: waiting for the view")
		}
	}
}
