package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/tracing"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// maxHops bounds the silos a message passes through: a silo whose view is
// older than the sender's may forward it once more, and so on.
const maxHops = 3

// The runtime's own message types between silos.
const (
	// msgRelease asks a silo to deactivate an address (To) that the asker
	// owns in its view (ViewVersion) and to reply once it has.
	msgRelease = grain.ReservedPrefix + "release"
	// msgSwept tells a peer that the sender has applied the view
	// ViewVersion, which has the peer in it, and deactivated every
	// activation it no longer owns. Message is "<peer's lease> <sender's
	// lease>" (decimal): the incarnations of both that the view holds. A
	// silo sends it to the members it has not told since they joined (and
	// to every member while it is leaving), so that a view change costs
	// messages in proportion to the silos that joined or leave, not to the
	// square of the cluster's size (see router).
	msgSwept = grain.ReservedPrefix + "swept"
	// msgAgents asks a silo for its activations (Message: a type or "").
	msgAgents = grain.ReservedPrefix + "agents"
	// msgCount asks a silo for its number of activations.
	msgCount = grain.ReservedPrefix + "count"
	// msgTypes asks a silo for its agent types.
	msgTypes = grain.ReservedPrefix + "types"
	// msgDeclared asks a silo to reply once it has applied the declared
	// types up to a revision (Message, decimal), with the revision it has
	// applied.
	msgDeclared = grain.ReservedPrefix + "declared"
	// msgDeactivate asks the silo that owns To to deactivate it, if active.
	msgDeactivate = grain.ReservedPrefix + "deactivate"
	// msgReminders asks the silo that held a reminder bucket (Message: its
	// number) before the asker took it over for the bucket's reminders
	// (reminders.Service.Export); the reply's Data holds them.
	msgReminders = grain.ReservedPrefix + "reminders"
)

// router places addresses over the membership view and carries messages
// between silos: it is the runtime's siloapi.Placement. What peers send it
// arrives through peerHandler (peer.go); views.go follows the membership's
// views and sweeps what they move away.
//
// Single activation. An address is activated only by the silo that owns it
// in its view, and only after Claim made sure no other silo can still hold
// it:
//   - a member that left the view without leaving gracefully, and that
//     ranked above this silo for the address, must be certainly fenced
//     (Membership.TakeoverAt), or proven dead by two independent signals
//     (Membership.ProvenDead: its peer port refused connections and etcd
//     showed its lease unrenewed);
//   - every other member that may still hold it is asked to release the
//     address: it first catches up with the asker's view, then deactivates
//     its activation, if any, and answers. A member that is leaving may hold
//     it unless it reported sweeping the current view. Any other member of
//     the current view ranks below this silo for the address (rendezvous
//     hashing), so it can have owned the address only in a view without
//     this silo: once it reports sweeping a view that holds this silo (the
//     incarnation of this lease), it deactivated the address then and has
//     not owned it since, as every later view it installs holds this silo
//     too. Each member tells each other member that once, when it first
//     sweeps a view holding it (see views.sweep): a join costs a notice from
//     each member to the joiner and one from the joiner to each member.
//
// Claim then holds mu for reading until the activation is in the runtime's
// directory, and a new view is installed under mu held for writing, so an
// activation is either seen by the sweep of the view that moves it away, or
// never created. A view change deactivates the activations that moved after
// their current turn; their queued messages follow them.
type router struct {
	self   string
	log    *slog.Logger
	clk    clock.Clock
	m      *membership.Membership
	tp     *transport.Transport
	tracer tracing.Tracer // the forward spans

	mu    sync.RWMutex // see above
	state atomic.Pointer[routeState]
	prev  atomic.Pointer[routeState] // the state before state (see fetchReminders)

	smu     sync.Mutex
	swept   map[incarnation]int64              // peer incarnation -> newest view version it reported swept
	sweptMe map[incarnation]int64              // peer incarnation -> newest view version holding this silo it reported swept
	leases  map[string]int64                   // member -> lease of its record in the newest view
	changed chan struct{}                      // closed and replaced when state or swept change
	probes  map[membership.Departure]dialProbe // provenDead's last dial of each departure

	reach *reach // the probes of the members' peer ports (reach.go); nil until startReach

	notices  atomic.Int64 // swept notices sent (see msgSwept)
	releases atomic.Int64 // release requests sent (see handover)
}

// incarnation is one run of a silo: its name and the lease of its record.
type incarnation struct {
	name  string
	lease int64
}

// dialProbe is the outcome of a dial to a departed silo's peer port.
type dialProbe struct {
	dead bool
	at   time.Time
}

type routeState struct {
	view   membership.View
	owners []string          // view.Owners()
	table  *ownerTable       // owners' owner of each address
	peers  map[string]string // member name -> its peer address, for Forward
	self   bool              // this silo owns addresses in view
}

// newRouter returns the router of silo self, routing by the views of m (which
// it reads once m has started) and sending through tp.
func newRouter(self string, m *membership.Membership, tp *transport.Transport, tr tracing.Tracer, clk clock.Clock, log *slog.Logger) *router {
	r := &router{
		self:    self,
		log:     log,
		clk:     clk,
		m:       m,
		tp:      tp,
		tracer:  tr,
		swept:   make(map[incarnation]int64),
		sweptMe: make(map[incarnation]int64),
		leases:  make(map[string]int64),
		changed: make(chan struct{}),
		probes:  make(map[membership.Departure]dialProbe),
	}
	r.state.Store(&routeState{table: newOwnerTable(nil)})
	return r
}

// install makes v the view that routes messages.
func (r *router) install(v membership.View) {
	// A silo that restarted on the same peer address: the stream to its
	// predecessor may be backing off after failed dials; drop it before
	// routing there, so that the first message dials the new one.
	var restarted []string
	r.smu.Lock()
	for _, mi := range v.Members {
		if old, ok := r.leases[mi.Name]; ok && old != mi.LeaseID {
			restarted = append(restarted, mi.PeerAddr)
		}
		r.leases[mi.Name] = mi.LeaseID
	}
	r.smu.Unlock()
	for _, addr := range restarted {
		r.tp.Redial(addr)
	}
	st := &routeState{view: v, owners: v.Owners(), peers: make(map[string]string, len(v.Members))}
	st.table = newOwnerTable(st.owners)
	for _, mi := range v.Members {
		st.peers[mi.Name] = mi.PeerAddr
	}
	for _, o := range st.owners {
		if o == r.self {
			st.self = true
		}
	}
	prev := r.state.Load()
	if prev.view.Version == 0 {
		// This silo's first view: what it owns in it, the owners without
		// it held before it joined.
		others := slices.DeleteFunc(slices.Clone(st.owners), func(o string) bool { return o == r.self })
		prev = &routeState{owners: others, table: newOwnerTable(others)}
	}
	r.mu.Lock()
	r.prev.Store(prev)
	r.state.Store(st)
	r.mu.Unlock()
	r.smu.Lock()
	r.notifyLocked()
	r.smu.Unlock()
}

// closeDeparted retires the transport's streams to the peers that are not
// members of the installed view: once the calls they are answering have
// their results, their goroutines end and the transport stops redialling
// them. It runs after each view is installed and after each
// sweep (whose notices, sent by an older view, may have opened a stream to a
// silo that left meanwhile); a sender that opened one with a view it read
// before a change has it closed at the next. The view cannot change while it
// runs, so a silo that joins again at the same address keeps its stream.
func (r *router) closeDeparted() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v := r.state.Load().view
	for _, addr := range r.tp.Peers() {
		if !slices.ContainsFunc(v.Members, func(mi membership.Member) bool { return mi.PeerAddr == addr }) {
			r.log.Debug("closing the stream to a silo that left the view", "peer", addr)
			r.tp.Retire(addr)
		}
	}
}

// noteSwept records that peer reported sweeping view version; leases is
// the notice's "<this silo's lease> <peer's lease>" (empty from a silo of an
// earlier version, which tells every member at every view change).
func (r *router) noteSwept(peer string, version int64, leases string) {
	to, from, ok := parseLeases(leases)
	r.smu.Lock()
	defer r.smu.Unlock()
	// By the sender's incarnation: a late notice of an earlier run of a
	// restarted silo says nothing of what its new run holds. A notice
	// without leases counts for the run in the newest view, as before.
	inc := incarnation{peer, from}
	if !ok {
		inc.lease = r.leases[peer]
	}
	if version > r.swept[inc] {
		r.swept[inc] = version
	}
	if ok && to == r.m.Self().LeaseID {
		if inc := (incarnation{peer, from}); version > r.sweptMe[inc] {
			r.sweptMe[inc] = version
		}
	}
	r.notifyLocked()
}

// parseLeases reads a swept notice's "<to> <from>" leases.
func parseLeases(s string) (to, from int64, ok bool) {
	a, b, ok := strings.Cut(s, " ")
	if !ok {
		return 0, 0, false
	}
	to, err1 := strconv.ParseInt(a, 10, 64)
	from, err2 := strconv.ParseInt(b, 10, 64)
	return to, from, err1 == nil && err2 == nil
}

// mayHoldLocked reports whether member mi of view v, in which this silo owns an
// address, may still hold an activation of it (see router). Called with smu
// held.
func (r *router) mayHoldLocked(mi membership.Member, v membership.View) bool {
	if r.swept[incarnation{mi.Name, mi.LeaseID}] >= v.Version {
		return false
	}
	if mi.Unreachable {
		// It cannot be asked, and said in its record when it held nothing
		// more (membership/unreachable.go).
		return !mi.Drained
	}
	if mi.Leaving {
		return true
	}
	return r.sweptMe[incarnation{mi.Name, mi.LeaseID}] == 0
}

func (r *router) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Route implements siloapi.Placement.
func (r *router) Route(key string) string {
	st := r.state.Load()
	owner := st.table.owner(key)
	if owner == r.self || owner == "" {
		return ""
	}
	return owner
}

// Hold implements siloapi.Placement.
func (r *router) Hold(key string) (bool, func()) {
	r.mu.RLock()
	st := r.state.Load()
	owner := st.table.owner(key)
	return owner == r.self || owner == "", r.mu.RUnlock
}

// Serving implements siloapi.Placement: false before the silo has joined,
// and once it may have lost its place (see membership.Membership.Valid).
func (r *router) Serving() bool { return r.m.Valid() }

// WaitServing implements siloapi.ServingWaiter: turns wait while the silo is
// suspended (see membership.Membership.WaitValid).
func (r *router) WaitServing(ctx context.Context) error { return r.m.WaitValid(ctx) }

// Claim implements siloapi.Placement.
func (r *router) Claim(ctx context.Context, key string) (func(), error) {
	b := retry.New(20*time.Millisecond, 500*time.Millisecond, r.clk)
	for {
		if err := r.m.WaitValid(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "silo %s is suspended (etcd not answering) and did not serve again in time", r.self)
			}
			return nil, errs.New(codes.Unavailable, "silo %s is fenced", r.self)
		}
		st := r.state.Load()
		if owner := st.table.owner(key); owner != r.self && owner != "" {
			return nil, siloapi.ErrMoved
		}
		if !st.self {
			return nil, errs.New(codes.Unavailable, "silo %s is not serving activations", r.self)
		}
		if err := r.awaitFenced(ctx, key); err != nil {
			return nil, err
		}
		if err := r.handover(ctx, key, st); err != nil {
			// A peer that cannot answer now (restarting, or dead and not yet
			// out of the view) may answer in a moment, or leave the view:
			// try again, bounded by ctx.
			if errs.Code(err) != codes.Unavailable || !r.backoff(ctx, b) {
				return nil, err
			}
			continue
		}
		r.mu.RLock()
		if r.state.Load() == st {
			return r.mu.RUnlock, nil
		}
		r.mu.RUnlock()
	}
}

// backoff waits b's next wait (20 ms doubling to 500 ms) or until the view or the
// peers' sweeps change; false if ctx ended.
func (r *router) backoff(ctx context.Context, b *retry.Backoff) bool {
	r.smu.Lock()
	ch := r.changed
	r.smu.Unlock()
	return b.Wait(ctx, ch)
}

// awaitFenced waits until every member that left the view without leaving
// gracefully, and that could hold key, is certainly fenced or proven dead.
func (r *router) awaitFenced(ctx context.Context, key string) error {
	mine := weight(r.self, key)
	for _, d := range r.m.Pending() {
		if d.Name != r.self && weight(d.Name, key) < mine && r.sweptWithSelf(d) {
			continue // it never owned key since it swept a view holding this silo
		}
		if r.provenDead(ctx, d) {
			continue
		}
		wait := d.At.Sub(r.clk.Now())
		if wait <= 0 {
			continue
		}
		t := r.clk.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "%s: waiting for silo %s, which left the view, to be fenced (it did not run)", key, d.Name)
		}
	}
	return nil
}

// sweptWithSelf reports whether the departed silo reported sweeping a view
// that held this silo: ranking below this silo for an address, it has not
// owned it since (see router).
func (r *router) sweptWithSelf(d membership.Departure) bool {
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.sweptMe[incarnation{d.Name, int64(d.Lease)}] > 0
}

// provenDead reports whether the departed silo's process is certainly gone
// (membership.Membership.ProvenDead: its peer port refused connections
// and etcd showed its lease unrenewed). A silo that is only cut off, or
// behind a firewall that answers with resets, is waited for.
func (r *router) provenDead(ctx context.Context, d membership.Departure) bool {
	if d.PeerAddr == "" || d.Name == r.self {
		return false
	}
	r.smu.Lock()
	p, ok := r.probes[d]
	r.smu.Unlock()
	if ok && (p.dead || clock.Since(r.clk, p.at) < 250*time.Millisecond) {
		return p.dead // one dial serves the claims of a quarter second
	}
	dead := r.m.ProvenDead(ctx, d)
	r.smu.Lock()
	r.probes[d] = dialProbe{dead: dead, at: r.clk.Now()}
	r.smu.Unlock()
	if dead && !p.dead {
		r.log.Info("a departed silo is proven dead (its peer port refused connections and its lease went unrenewed); taking over without waiting for its fence", "silo", d.Name)
	}
	return dead
}

// handover asks every member that may still hold key to release it.
func (r *router) handover(ctx context.Context, key string, st *routeState) error {
	var peers []membership.Member
	r.smu.Lock()
	for _, mi := range st.view.Members {
		if mi.Name != r.self && r.mayHoldLocked(mi, st.view) {
			peers = append(peers, mi)
		}
	}
	r.smu.Unlock()
	if len(peers) == 0 {
		return nil
	}
	r.releases.Add(int64(len(peers)))
	errc := make(chan error, len(peers))
	for _, mi := range peers {
		go func() {
			_, err := r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
				Message:     &agentsilov1.AgentMessage{MessageType: msgRelease, To: key, From: r.self},
				ViewVersion: st.view.Version,
			})
			if err != nil {
				err = errs.New(errs.Code(err), "%s: silo %s did not release it: %w", key, mi.Name, errs.FromStatus(err))
			}
			errc <- err
		}()
	}
	var first error
	for range peers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if errs.Code(first) == codes.FailedPrecondition {
		return siloapi.ErrMoved // that silo owns it in a newer view
	}
	return first
}

// requestEnvelopes recycles the envelopes of the requests Forward sends.
var requestEnvelopes = sync.Pool{New: func() any { return new(transport.Envelope) }}

// Forward implements siloapi.Placement.
func (r *router) Forward(ctx context.Context, silo string, msg *agentsilov1.AgentMessage, hops int) (_ *agentsilov1.AgentMessage, err error) {
	if hops+1 >= maxHops {
		return nil, errs.New(codes.Unavailable, "%s: not delivered after %d hops: the silos' views disagree", msg.To, hops+1)
	}
	st := r.state.Load()
	peer, ok := st.peers[silo]
	if !ok {
		// The view changed since the runtime routed msg: nothing was sent,
		// so it is routed again with the new one.
		return nil, siloapi.ErrMoved
	}
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = r.tracer.Start(ctx, "forward "+tracing.KindName(msg.Kind), trace.SpanKindClient, msg, attribute.String("agentsilo.silo", silo))
		defer func() { tracing.End(span, err) }()
	}
	if msg.Kind != agentsilov1.Kind_KIND_REQUEST {
		env := &transport.Envelope{Kind: msg.Kind, Message: msg, ViewVersion: st.view.Version, Hops: uint32(hops + 1)}
		return nil, r.tp.Send(ctx, peer, env)
	}
	// A request the peer certainly never received (its stream was down, or
	// broke before the request was written) is sent again, within its
	// deadline: to the same silo once its stream is back, or routed again
	// (siloapi.ErrMoved) once a newer view moves the address elsewhere. One
	// that may have reached the peer fails (Unavailable, saying so): it
	// may have run.
	b := retry.New(20*time.Millisecond, 500*time.Millisecond, r.clk)
	for {
		env := requestEnvelopes.Get().(*transport.Envelope)
		env.Kind, env.Message, env.ViewVersion, env.Hops = msg.Kind, msg, st.view.Version, uint32(hops+1)
		resp, err := r.tp.Ask(ctx, peer, env)
		if err == nil {
			// Answered: the request was written, and the transport is
			// done with its envelope. (After an error it may still be
			// queued, or held for a retry: it is left to the GC.)
			*env = transport.Envelope{}
			requestEnvelopes.Put(env)
		}
		if !errors.Is(err, transport.ErrNotDelivered) {
			return resp, err
		}
		if r.reach != nil {
			r.reach.doubtPeer(silo) // probed at once: unreachable, or only restarting?
		}
		if !r.backoff(ctx, b) {
			// Its caller's deadline (or cancellation) ended it, not a
			// silo: the code says so.
			return nil, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "%s: not delivered to silo %s before the deadline (it did not run): %w", msg.To, silo, err)
		}
		st = r.state.Load()
		if st.table.owner(msg.To) != silo {
			return nil, siloapi.ErrMoved
		}
		if peer, ok = st.peers[silo]; !ok {
			return nil, siloapi.ErrMoved
		}
	}
}

// startReach starts probing the members' peer ports (reach.go), reporting
// those not reached for grace, until the membership closes; rt is the
// runtime an unreachable silo drains, and drained is called once it has.
func (r *router) startReach(grace time.Duration, rt siloapi.Runtime, drained func()) {
	r.reach = newReach(r, grace)
	r.reach.rt = func() siloapi.Runtime { return rt }
	r.reach.onDrained = drained
	go r.reach.run()
}

// waitVersion waits until this silo's view is at least version.
func (r *router) waitVersion(ctx context.Context, version int64) error {
	for {
		r.smu.Lock()
		st, ch := r.state.Load(), r.changed
		r.smu.Unlock()
		if st.view.Version >= version {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// catchUp waits briefly for this silo's view to reach the view of the silo
// that forwarded a message, so that the message is routed with that view
// rather than sent back.
func (r *router) catchUp(ctx context.Context, version int64) {
	if r.state.Load().view.Version >= version {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = r.waitVersion(ctx, version) // routed with the view it has, then
}

// owns reports whether this silo fires the reminders of addr.
func (r *router) owns(addr grain.Address) bool {
	return r.state.Load().self && r.Route(addr.String()) == ""
}
