package membership

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// A member that the others cannot reach on its peer port (it advertises an
// address nothing listens on, a firewall drops what is sent to it, its
// listener failed) while it renews its lease is neither dead nor fenced: left
// alone, it would own a share of the addresses, and every call routed to it
// would fail. The silos (package cluster) probe each other's peer ports, and
// each reports in etcd the members it could not reach for a grace period:
// <prefix>suspects/<member>/<reporter>, holding the member's lease, bound to
// the reporter's lease, written again at every failed probe while it lasts,
// and deleted when a probe succeeds (ReportUnreachable, ClearUnreachable).
//
// The member reads the reports about itself (CheckUnreachable). When a
// strict majority of the other members (not leaving, not unreachable
// themselves) report it, and each of them writes its report again after the
// member first saw the majority, and no sooner than a grace period after
// that (so that reports left from a pause of the member, SIGSTOP or a long
// GC, whose reporters reach it again, do not count), the member marks its own record Unreachable, in a transaction
// that fails if any of those reporters' records changed meanwhile: two
// members that cannot reach each other (a cluster of two, split) cannot
// both mark themselves.
//
// From the view that shows the mark, the member owns no addresses
// (View.Owners leaves it out), like a member that is leaving, and it never
// owns any again in this run: only the member writes its record, and the
// mark is never taken back. Placement thus stays a function of the view,
// which every silo computes alike. The member then deactivates every
// activation it holds (its own sweep of that view) and marks its record
// Drained (MarkDrained). The new owner of one of its addresses must know
// that the member no longer holds it before activating it, and the member
// cannot be asked: until the record says Drained, claims of its addresses
// wait (they fail at their deadline); from then on, they do not ask it.
// A member that dies meanwhile leaves the view as any other, and its
// addresses are taken over once it is fenced.
//
// An unreachable member serves nothing more until it is restarted (with a
// new lease, it joins as a new member, and is probed again).

// The standings of Membership.unreach.
const (
	reachable int32 = iota
	unreachMarked
	unreachDrained
)

func (m *Membership) suspectDir() string { return m.cfg.Prefix + "suspects/" }

func (m *Membership) suspectKey(member, by string) string {
	return m.suspectDir() + member + "/" + by
}

// ReportUnreachable records, or records again, that this silo cannot reach
// mi's peer port. The report lives as long as this silo's lease.
func (m *Membership) ReportUnreachable(ctx context.Context, mi Member) error {
	if mi.Name == m.cfg.Name || m.lease == 0 {
		return nil
	}
	_, err := m.client.Put(ctx, m.suspectKey(mi.Name, m.cfg.Name), strconv.FormatInt(mi.LeaseID, 10), clientv3.WithLease(m.lease))
	return etcderr.FromCall(ctx, err, "membership: report an unreachable member")
}

// ClearUnreachable deletes this silo's report about the member name.
func (m *Membership) ClearUnreachable(ctx context.Context, name string) error {
	_, err := m.client.Delete(ctx, m.suspectKey(name, m.cfg.Name))
	return etcderr.FromCall(ctx, err, "membership: clear a report of an unreachable member")
}

// Report is one member's report that it cannot reach another.
type Report struct {
	// Member is the member reported, Lease the lease of its record when it
	// was reported, and By the reporter.
	Member, By string
	Lease      int64
}

// Reports returns the reports of unreachable members in etcd.
func (m *Membership) Reports(ctx context.Context) ([]Report, error) {
	resp, err := m.client.Get(ctx, m.suspectDir(), clientv3.WithPrefix())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "membership: read the reports of unreachable members")
	}
	out := make([]Report, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		member, by, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), m.suspectDir()), "/")
		lease, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if ok && err == nil {
			out = append(out, Report{Member: member, By: by, Lease: lease})
		}
	}
	return out, nil
}

// Context returns a context that ends when the membership closes: for
// the silo's work that follows the membership.
func (m *Membership) Context() context.Context { return m.ctx }

// Unreachable reports whether this silo's record is marked unreachable.
func (m *Membership) Unreachable() bool { return m.unreach.Load() != reachable }

// CheckUnreachable reads the reports about this silo and marks its record
// Unreachable when a majority of the other members report it and confirm
// it (see above), no sooner than wait after it first saw the majority
// (the reporters' time to reach it again); it returns the reporters then,
// and nil otherwise. It is called from one goroutine, at every probe
// round.
func (m *Membership) CheckUnreachable(ctx context.Context, wait time.Duration) ([]string, error) {
	if m.unreach.Load() != reachable || m.lease == 0 {
		return nil, nil
	}
	// The reports and the records, at one revision.
	resp, err := m.client.Txn(ctx).Then(
		clientv3.OpGet(m.suspectDir()+m.cfg.Name+"/", clientv3.WithPrefix()),
		clientv3.OpGet(m.dir, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "membership: read the reports about this silo")
	}
	rev := resp.Header.Revision
	records := map[string]int64{} // the others that count: name -> record's revision
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var mi Member
		if json.Unmarshal(kv.Value, &mi) != nil || mi.Name == m.cfg.Name || mi.Leaving || mi.Unreachable {
			continue
		}
		if strings.TrimPrefix(string(kv.Key), m.dir) == mi.Name {
			records[mi.Name] = kv.ModRevision
		}
	}
	mine := strconv.FormatInt(int64(m.lease), 10)
	var all, confirmed []string
	reportRevs := map[string]int64{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		by := strings.TrimPrefix(string(kv.Key), m.suspectDir()+m.cfg.Name+"/")
		if _, ok := records[by]; !ok || string(kv.Value) != mine {
			continue
		}
		all = append(all, by)
		reportRevs[by] = kv.ModRevision
		if m.unreachFrom != 0 && kv.ModRevision > m.unreachFrom {
			confirmed = append(confirmed, by)
		}
	}
	majority := func(n int) bool { return n > 0 && 2*n > len(records) }
	switch {
	case !majority(len(all)):
		if m.unreachFrom != 0 {
			m.log.Info("fewer than a majority of the other silos report that they cannot reach this silo now", "reported_by", all)
		}
		m.unreachFrom = 0
		return nil, nil
	case m.unreachFrom == 0:
		m.unreachFrom, m.unreachSeen = rev, m.clk.Now()
		m.log.Warn("a majority of the other silos report that they cannot reach this silo's peer port; waiting for them to confirm", "reported_by", all, "peer_addr", m.cfg.PeerAddr)
		return nil, nil
	case !majority(len(confirmed)) || clock.Since(m.clk, m.unreachSeen) < wait:
		return nil, nil
	}
	// Mark the record, unless a reporter's record or report changed since
	// the read (it may have marked itself unreachable meanwhile).
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(m.key), "=", m.lease)}
	for _, by := range confirmed {
		conds = append(conds,
			clientv3.Compare(clientv3.ModRevision(m.dir+by), "=", records[by]),
			clientv3.Compare(clientv3.ModRevision(m.suspectKey(m.cfg.Name, by)), "=", reportRevs[by]))
	}
	m.unreach.Store(unreachMarked)
	ok := false
	defer func() {
		if !ok {
			m.unreach.Store(reachable)
		}
	}()
	m.mu.Lock()
	leaving := m.leaving
	m.mu.Unlock()
	rec, err := json.Marshal(m.record(leaving))
	if err != nil {
		return nil, errs.New(codes.Internal, "membership: %w", err)
	}
	tx, err := m.client.Txn(ctx).If(conds...).Then(clientv3.OpPut(m.key, string(rec), clientv3.WithLease(m.lease))).Commit()
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "membership: mark the record unreachable")
	}
	if !tx.Succeeded {
		return nil, nil // read again at the next round
	}
	ok = true
	m.log.Error("the other silos cannot reach this silo's peer port: it takes no agents from now on (restart it once they can reach it)", "reported_by", confirmed, "peer_addr", m.cfg.PeerAddr)
	if err := m.waitView(ctx, func(v View) bool { mi, ok := v.Member(m.cfg.Name); return !ok || mi.Unreachable }); err != nil {
		return confirmed, err
	}
	return confirmed, nil
}

// CheckUnreachableSeen is CheckUnreachable for a caller that has just
// read the reports (Reports): while none of them reports this silo under
// its lease and no majority was seen before, there is nothing to count,
// and it reads nothing from etcd. CheckUnreachable reads, with the reports
// about this silo, every member's record: called by every silo at every
// probe round, that is the whole member list per silo and round, N^2
// records a round for the cluster. A report written after the caller's
// read counts at the next call.
func (m *Membership) CheckUnreachableSeen(ctx context.Context, wait time.Duration, reports []Report) ([]string, error) {
	if m.unreach.Load() != reachable || m.lease == 0 {
		return nil, nil
	}
	mine := int64(m.lease)
	if m.unreachFrom == 0 && !slices.ContainsFunc(reports, func(r Report) bool {
		return r.Member == m.cfg.Name && r.By != m.cfg.Name && r.Lease == mine
	}) {
		return nil, nil
	}
	return m.CheckUnreachable(ctx, wait)
}

// MarkDrained marks this silo's record, already Unreachable, Drained: it
// holds no activation and will start none (see above). It returns once the
// view shows it.
func (m *Membership) MarkDrained(ctx context.Context) error {
	if m.unreach.Load() == reachable {
		return errs.New(codes.FailedPrecondition, "membership: drained while not unreachable")
	}
	m.unreach.Store(unreachDrained)
	m.mu.Lock()
	leaving := m.leaving
	m.mu.Unlock()
	if err := m.putRecord(ctx, leaving, "mark the record drained"); err != nil {
		return err
	}
	return m.waitView(ctx, func(v View) bool { mi, ok := v.Member(m.cfg.Name); return !ok || mi.Drained })
}
