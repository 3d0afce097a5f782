package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// reach keeps the cluster from giving work to a member that no one can
// reach on its peer port (see membership/unreachable.go for the protocol
// and why it keeps single activation). Each silo probes the peer port of
// the members it has a reason to doubt: each member once when it joins the
// view, a member a forwarded message could not be delivered to, and a
// member another silo reports. A probe is a runtime request over the
// silo-to-silo transport (the listing count every silo answers), so it
// takes the path agents' messages take, TLS included. A member not reached
// by any probe for the grace period (the lease TTL) is reported in etcd,
// and reported again at every failed probe; a probe that reaches it clears
// the report. Every round, the silo also reads the reports about itself:
// when a majority of the others report it and confirm it, it marks itself
// unreachable, deactivates its activations and marks itself drained.
//
// A cluster where every member reaches every other costs one probe per
// member and join, and one etcd read per silo and round (of the reports,
// none then: the members' records are read only while some report this
// silo).
type reach struct {
	r     *router
	rt    func() siloapi.Runtime // the runtime, once built
	clk   clock.Clock
	log   *slog.Logger
	grace time.Duration // a member not reached for this long is reported
	every time.Duration // a round of probes

	mu       sync.Mutex
	doubt    map[incarnation]bool      // members to probe at the next round
	failing  map[incarnation]time.Time // members not reached since
	reported map[string]bool           // members this silo reported
	seen     map[incarnation]bool      // members probed once at their join
	kick     chan struct{}
	drained  bool
	// onDrained is called once this silo, marked unreachable, has drained
	// (nil: nothing).
	onDrained func()
}

func newReach(r *router, grace time.Duration) *reach {
	return &reach{
		r: r, clk: r.clk, log: r.log, grace: grace, every: min(max(grace/2, 100*time.Millisecond), time.Second),
		doubt: map[incarnation]bool{}, failing: map[incarnation]time.Time{}, reported: map[string]bool{},
		seen: map[incarnation]bool{}, kick: make(chan struct{}, 1),
	}
}

// doubtPeer makes the next round probe the member name (a message to it
// was not delivered), at once.
func (x *reach) doubtPeer(name string) {
	mi, ok := x.r.state.Load().view.Member(name)
	if !ok {
		return
	}
	x.mu.Lock()
	x.doubt[incarnation{mi.Name, mi.LeaseID}] = true
	x.mu.Unlock()
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// run probes until the membership closes its views.
func (x *reach) run() {
	views, cancel := x.r.m.Subscribe()
	defer cancel()
	ctx := x.r.m.Context()
	t := x.clk.NewTimer(x.every)
	defer t.Stop()
	for {
		select {
		case v, ok := <-views:
			if !ok {
				return
			}
			x.joined(v)
			continue
		case <-x.kick:
		case <-t.C():
			t.Reset(x.every)
		}
		x.round(ctx)
	}
}

// joined makes the next round probe the members new in v once.
func (x *reach) joined(v membership.View) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, mi := range v.Members {
		inc := incarnation{mi.Name, mi.LeaseID}
		if mi.Name != x.r.self && !x.seen[inc] {
			x.seen[inc] = true
			x.doubt[inc] = true
		}
	}
	for inc := range x.seen {
		if mi, ok := v.Member(inc.name); !ok || mi.LeaseID != inc.lease {
			delete(x.seen, inc)
			delete(x.doubt, inc)
			delete(x.failing, inc)
		}
	}
}

// round probes the doubted members, reports or clears them, and checks
// the reports about this silo.
func (x *reach) round(ctx context.Context) {
	r := x.r
	v := r.m.View()
	self, in := v.Member(r.self)
	if !in || self.Leaving || !r.m.Valid() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, x.every+x.grace)
	defer cancel()
	reports, readErr := r.m.Reports(ctx)
	if readErr != nil {
		r.log.Debug("reports of unreachable members not read", "err", readErr)
	}
	reportedByOthers := map[incarnation]bool{}
	for _, rep := range reports {
		if rep.By != r.self {
			reportedByOthers[incarnation{rep.Member, rep.Lease}] = true
		}
	}
	var targets []membership.Member
	x.mu.Lock()
	for _, mi := range v.Members {
		inc := incarnation{mi.Name, mi.LeaseID}
		if mi.Name == r.self || mi.Leaving || mi.Unreachable {
			continue
		}
		if x.doubt[inc] || reportedByOthers[inc] || !x.failing[inc].IsZero() || x.reported[mi.Name] {
			targets = append(targets, mi)
		}
	}
	x.mu.Unlock()

	reached := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, mi := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reached[i] = x.probe(ctx, mi)
		}()
	}
	wg.Wait()

	now := x.clk.Now()
	for i, mi := range targets {
		inc := incarnation{mi.Name, mi.LeaseID}
		x.mu.Lock()
		delete(x.doubt, inc)
		since, wasFailing := x.failing[inc], !x.failing[inc].IsZero()
		wasReported := x.reported[mi.Name]
		if reached[i] {
			delete(x.failing, inc)
		} else if !wasFailing {
			x.failing[inc] = now
			since = now
		}
		report := !reached[i] && now.Sub(since) >= x.grace
		if report {
			x.reported[mi.Name] = true
		} else if reached[i] {
			delete(x.reported, mi.Name)
		}
		x.mu.Unlock()
		switch {
		case reached[i] && wasFailing:
			r.log.Info("a member's peer port is reachable again", "member", mi.Name, "peer_addr", mi.PeerAddr)
		case !reached[i] && !wasFailing:
			r.log.Warn("cannot reach a member's peer port; it is reported unreachable if this lasts", "member", mi.Name, "peer_addr", mi.PeerAddr, "grace", x.grace)
		}
		if report {
			if !wasReported {
				r.log.Warn("reporting a member unreachable: its peer port did not answer for the grace period", "member", mi.Name, "peer_addr", mi.PeerAddr, "since", since)
			}
			if err := r.m.ReportUnreachable(ctx, mi); err != nil {
				r.log.Debug("report not written", "member", mi.Name, "err", err)
			}
		} else if reached[i] && wasReported {
			if err := r.m.ClearUnreachable(ctx, mi.Name); err != nil {
				r.log.Debug("report not cleared", "member", mi.Name, "err", err)
			}
		}
	}
	// Reports about members gone from the view go too.
	x.mu.Lock()
	var gone []string
	for name := range x.reported {
		if mi, ok := v.Member(name); !ok || mi.Unreachable {
			gone = append(gone, name)
			delete(x.reported, name)
		}
	}
	x.mu.Unlock()
	for _, name := range gone {
		if err := r.m.ClearUnreachable(ctx, name); err != nil {
			r.log.Debug("report not cleared", "member", name, "err", err)
		}
	}
	x.checkSelf(ctx, reports, readErr)
}

// probe reports whether mi's peer port answers a runtime request within
// the grace period. An answer that is an error of the peer's own (not a
// failure to reach it) counts as reached.
func (x *reach) probe(ctx context.Context, mi membership.Member) bool {
	ctx, cancel := context.WithTimeout(ctx, x.grace)
	defer cancel()
	// A stream that broke is dialled again now, not after its reconnect
	// backoff: a member that answers again is seen at once.
	x.r.tp.Redial(mi.PeerAddr)
	_, err := x.r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
		Message:     &agentsilov1.AgentMessage{MessageType: msgCount, From: x.r.self},
		ViewVersion: x.r.state.Load().view.Version,
	})
	if err == nil {
		return true
	}
	if errors.Is(err, transport.ErrNotDelivered) {
		return false
	}
	switch errs.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// checkSelf marks this silo unreachable when the others say so, and then
// drains it: its sweep of the view that shows the mark deactivates every
// activation (it owns none in it); once none is left, it says so. reports
// are the round's reports (readErr: why they were not read); while none
// is about this silo, nothing more is read.
func (x *reach) checkSelf(ctx context.Context, reports []membership.Report, readErr error) {
	r := x.r
	if x.drained {
		return
	}
	if !r.m.Unreachable() {
		var by []string
		var err error
		if readErr == nil {
			by, err = r.m.CheckUnreachableSeen(ctx, x.grace, reports)
		} else {
			by, err = r.m.CheckUnreachable(ctx, x.grace)
		}
		if err != nil {
			r.log.Debug("reports about this silo not checked", "err", err)
		}
		if by == nil {
			return
		}
	}
	rt := x.rt()
	if rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.waitVersion(ctx, r.m.View().Version); err != nil {
		return // the next round tries again
	}
	if err := rt.Rehome(ctx, func(string) bool { return false }); err != nil {
		r.log.Warn("draining this unreachable silo: activations not all ended; trying again", "err", err)
		return
	}
	if err := r.m.MarkDrained(ctx); err != nil {
		r.log.Warn("draining this unreachable silo: not marked drained; trying again", "err", err)
		return
	}
	x.drained = true
	r.log.Error("this silo is drained: no agent runs here, the other silos have taken its agents; it must start again (the silo program does, after a pause) once the others can reach its peer port", "peer_addr", r.m.Self().PeerAddr)
	if x.onDrained != nil {
		x.onDrained()
	}
}
