package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// MaxHops bounds the silos a message passes through: a silo whose view is
// older than the sender's may forward it once more, and so on.
const MaxHops = 3

// The runtime's own message types between silos.
const (
	// msgRelease asks a silo to deactivate an address (To) that the asker
	// owns in its view (ViewVersion) and to reply once it has.
	msgRelease = grain.ReservedPrefix + "release"
	// msgSwept tells the peers that the sender has applied the view
	// ViewVersion and deactivated every activation it no longer owns.
	msgSwept = grain.ReservedPrefix + "swept"
	// msgAgents asks a silo for its activations (Message: a type or "").
	msgAgents = grain.ReservedPrefix + "agents"
)

// router places addresses over the membership view and carries messages
// between silos. It is the runtime's grain.Placement and the transport's
// TransportHandler.
//
// Single activation. An address is activated only by the silo that owns it
// in its view, and only after Claim made sure no other silo can still hold
// it:
//   - a member that left the view without leaving gracefully, and that
//     ranked above this silo for the address, must be certainly fenced
//     (Membership.TakeoverAt), or proven dead: a connection to its peer
//     address is refused, so its process is gone;
//   - every other member that has not reported that it swept (applied the
//     current view and deactivated what it no longer owns) is asked to
//     release the address: it first catches up with the asker's view, then
//     deactivates its activation, if any, and answers.
//
// Claim then holds mu for reading until the activation is in the runtime's
// directory, and a new view is installed under mu held for writing, so an
// activation is either seen by the sweep of the view that moves it away, or
// never created. A view change deactivates the activations that moved after
// their current turn; their queued messages follow them.
type router struct {
	self string
	log  *slog.Logger
	m    *Membership
	tp   *Transport
	rt   *grain.Runtime
	// membership is m for Serving, set once the silo has joined.
	membership atomic.Pointer[Membership]
	// tracer makes the forward and peer spans (see tracing.go).
	tracer tracer
	// onView, if set, runs after each view is installed and swept.
	onView func(prev, cur View)

	mu    sync.RWMutex // see above
	state atomic.Pointer[routeState]

	smu     sync.Mutex
	swept   map[string]int64        // peer -> newest view version it reported swept
	last    map[string]int64        // member -> newest view version that had it
	leases  map[string]int64        // member -> lease of its record in the newest view
	changed chan struct{}           // closed and replaced when state or swept change
	probes  map[Departure]dialProbe // provenDead's last dial of each departure

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// dialProbe is the outcome of a dial to a departed silo's peer port.
type dialProbe struct {
	dead bool
	at   time.Time
}

type routeState struct {
	view   View
	owners []string // view.Owners()
	self   bool     // this silo owns addresses in view
}

func newRouter(self string, m *Membership, tp *Transport, log *slog.Logger) *router {
	r := &router{
		self:    self,
		log:     log,
		m:       m,
		tp:      tp,
		swept:   make(map[string]int64),
		last:    make(map[string]int64),
		leases:  make(map[string]int64),
		changed: make(chan struct{}),
		probes:  make(map[Departure]dialProbe),
		tracer:  newTracer(nil),
	}
	r.state.Store(&routeState{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// start installs the current view and follows the membership's views.
func (r *router) start(rt *grain.Runtime) {
	r.rt = rt
	r.membership.Store(r.m)
	views, cancel := r.m.Subscribe()
	r.install(<-views)
	// Views are installed as they come; sweeping (which waits for moved
	// activations to finish their turns) runs beside, on the newest view,
	// so a long turn never holds up routing by a newer view.
	sweeps := make(chan View, 1)
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		defer cancel()
		defer close(sweeps)
		prev := r.state.Load().view
		sweeps <- prev
		for {
			select {
			case <-r.ctx.Done():
				return
			case v, ok := <-views:
				if !ok {
					return
				}
				r.install(v)
				select { // replace a sweep not yet started
				case <-sweeps:
				default:
				}
				sweeps <- v
				if r.onView != nil {
					r.onView(prev, v)
				}
				prev = v
			}
		}
	}()
	go func() {
		defer r.wg.Done()
		for v := range sweeps {
			r.sweep(v)
		}
	}()
}

func (r *router) close() {
	r.cancel()
	r.wg.Wait()
}

// install makes v the view that routes messages.
func (r *router) install(v View) {
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
	st := &routeState{view: v, owners: v.Owners()}
	for _, o := range st.owners {
		if o == r.self {
			st.self = true
		}
	}
	r.mu.Lock()
	r.state.Store(st)
	r.mu.Unlock()
	r.smu.Lock()
	for _, mi := range v.Members {
		r.last[mi.Name] = v.Version
	}
	r.notifyLocked()
	r.smu.Unlock()
}

// sweep deactivates what v moved away and tells the peers.
func (r *router) sweep(v View) {
	if err := r.rt.Rehome(r.ctx, func(key string) bool { return r.Route(key) == "" }); err != nil {
		return // closing
	}
	for _, mi := range v.Members {
		if mi.Name == r.self {
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
		err := r.tp.Send(ctx, mi.PeerAddr, &Envelope{
			Kind:        agentsilov1.Kind_KIND_ONE_WAY,
			Message:     &agentsilov1.AgentMessage{MessageType: msgSwept, From: r.self},
			ViewVersion: v.Version,
		})
		cancel()
		if err != nil {
			r.log.Debug("could not tell a peer the view is swept", "peer", mi.Name, "err", err)
		}
	}
}

func (r *router) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Route implements grain.Placement.
func (r *router) Route(key string) string {
	st := r.state.Load()
	owner := Owner(key, st.owners)
	if owner == r.self || owner == "" {
		return ""
	}
	return owner
}

// Hold implements grain.Placement.
func (r *router) Hold(key string) (bool, func()) {
	r.mu.RLock()
	st := r.state.Load()
	owner := Owner(key, st.owners)
	return owner == r.self || owner == "", r.mu.RUnlock
}

// Serving implements grain.Placement.
func (r *router) Serving() bool {
	m := r.membership.Load()
	return m == nil || m.Valid()
}

// Claim implements grain.Placement.
func (r *router) Claim(ctx context.Context, key string) (func(), error) {
	wait := 20 * time.Millisecond
	for {
		if !r.Serving() {
			return nil, errs.New(codes.Unavailable, "silo %s is fenced", r.self)
		}
		st := r.state.Load()
		if owner := Owner(key, st.owners); owner != r.self && owner != "" {
			return nil, grain.ErrMoved
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
			if errs.Code(err) != codes.Unavailable || !r.backoff(ctx, &wait) {
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

// backoff waits *wait (doubling it, up to 500 ms) or until the view or the
// peers' sweeps change; false if ctx ended.
func (r *router) backoff(ctx context.Context, wait *time.Duration) bool {
	r.smu.Lock()
	ch := r.changed
	r.smu.Unlock()
	t := time.NewTimer(*wait)
	defer t.Stop()
	*wait = min(2**wait, 500*time.Millisecond)
	select {
	case <-t.C:
	case <-ch:
	case <-ctx.Done():
		return false
	}
	return true
}

// awaitFenced waits until every member that left the view without leaving
// gracefully, and that could hold key, is certainly fenced or proven dead.
func (r *router) awaitFenced(ctx context.Context, key string) error {
	mine := Weight(r.self, key)
	for _, d := range r.m.Pending() {
		if d.Name != r.self && Weight(d.Name, key) < mine && r.sweptLast(d.Name) {
			continue // it never owned key since it last swept
		}
		if r.provenDead(ctx, d) {
			continue
		}
		wait := time.Until(d.At)
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errs.New(codes.Unavailable, "%s: waiting for silo %s, which left the view, to be fenced: %v", key, d.Name, ctx.Err())
		}
	}
	return nil
}

// sweptLast reports whether name reported sweeping the newest view it was in.
func (r *router) sweptLast(name string) bool {
	r.smu.Lock()
	defer r.smu.Unlock()
	last, ok := r.last[name]
	return ok && r.swept[name] >= last
}

// provenDead reports whether the departed silo's process is certainly gone:
// its peer address refuses connections (nothing listens there any more).
// A silo that is only cut off does not refuse, and is waited for.
func (r *router) provenDead(ctx context.Context, d Departure) bool {
	if d.PeerAddr == "" || d.Name == r.self {
		return false
	}
	r.smu.Lock()
	p, ok := r.probes[d]
	r.smu.Unlock()
	if ok && (p.dead || time.Since(p.at) < 250*time.Millisecond) {
		return p.dead // one dial serves the claims of a quarter second
	}
	dead := refused(ctx, d.PeerAddr)
	r.smu.Lock()
	r.probes[d] = dialProbe{dead: dead, at: time.Now()}
	r.smu.Unlock()
	if dead && !p.dead {
		r.log.Info("a departed silo is proven dead (its peer port refuses connections); taking over without waiting for its fence", "silo", d.Name)
	}
	return dead
}

// refused reports whether a TCP connection to addr is refused: the host is
// up and nothing listens on the port, so a silo that listened there is gone.
func refused(ctx context.Context, addr string) bool {
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

// handover asks every member that has not swept st's view to release key.
func (r *router) handover(ctx context.Context, key string, st *routeState) error {
	var peers []MemberInfo
	r.smu.Lock()
	for _, mi := range st.view.Members {
		if mi.Name != r.self && r.swept[mi.Name] < st.view.Version {
			peers = append(peers, mi)
		}
	}
	r.smu.Unlock()
	if len(peers) == 0 {
		return nil
	}
	errc := make(chan error, len(peers))
	for _, mi := range peers {
		go func() {
			_, err := r.tp.Ask(ctx, mi.PeerAddr, &Envelope{
				Message:     &agentsilov1.AgentMessage{MessageType: msgRelease, To: key, From: r.self},
				ViewVersion: st.view.Version,
			})
			if err != nil {
				err = errs.New(errs.Code(err), "%s: silo %s did not release it: %v", key, mi.Name, errs.FromStatus(err))
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
		return grain.ErrMoved // that silo owns it in a newer view
	}
	return first
}

// Forward implements grain.Placement.
func (r *router) Forward(ctx context.Context, silo string, msg *grain.Message, hops int) (_ *grain.Message, err error) {
	if hops+1 >= MaxHops {
		return nil, errs.New(codes.Unavailable, "%s: not delivered after %d hops: the silos' views disagree", msg.To, hops+1)
	}
	st := r.state.Load()
	mi, ok := st.view.Member(silo)
	if !ok {
		return nil, errs.New(codes.Unavailable, "%s: silo %s is not in the view", msg.To, silo)
	}
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = r.tracer.start(ctx, "forward "+kindName(msg.Kind), trace.SpanKindClient, msg, attribute.String("agentsilo.silo", silo))
		defer func() { end(span, err) }()
	}
	env := &Envelope{Kind: msg.Kind, Message: msg, ViewVersion: st.view.Version, Hops: uint32(hops + 1)}
	if msg.Kind == agentsilov1.Kind_KIND_REQUEST {
		return r.tp.Ask(ctx, mi.PeerAddr, env)
	}
	return nil, r.tp.Send(ctx, mi.PeerAddr, env)
}

// HandleRequest implements TransportHandler.
func (r *router) HandleRequest(ctx context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error) {
	msg := env.GetMessage()
	switch msg.GetMessageType() {
	case msgRelease:
		return nil, r.release(ctx, msg.GetTo(), env.GetViewVersion())
	case msgAgents:
		return r.agents(msg.GetMessage())
	}
	if grain.IsReserved(msg.GetMessageType()) {
		return nil, errs.New(codes.InvalidArgument, "unknown runtime message %q from silo %s", msg.GetMessageType(), from)
	}
	r.catchUp(ctx, env.GetViewVersion())
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = r.tracer.start(ctx, "peer Ask", trace.SpanKindServer, msg, attribute.String("agentsilo.from_silo", from))
		reply, err := r.rt.AskRemote(ctx, msg, int(env.GetHops()))
		end(span, err)
		return reply, err
	}
	return r.rt.AskRemote(ctx, msg, int(env.GetHops()))
}

// TryHandleRequest takes, without a goroutine of its own, a forwarded request
// for a live activation here (see grain.Runtime.TryAskRemote); everything
// else (runtime messages, a sender with a newer view, traced messages) goes
// to HandleRequest.
func (r *router) TryHandleRequest(ctx context.Context, _ string, env *Envelope, reply func(*agentsilov1.AgentMessage, error)) bool {
	msg := env.GetMessage()
	if msg.GetTraceparent() != "" || r.state.Load().view.Version < env.GetViewVersion() {
		return false
	}
	return r.rt.TryAskRemote(ctx, msg, int(env.GetHops()), reply)
}

// HandleOneWay implements TransportHandler.
func (r *router) HandleOneWay(ctx context.Context, from string, env *Envelope) {
	msg := env.GetMessage()
	if msg.GetMessageType() == msgSwept {
		r.smu.Lock()
		if env.GetViewVersion() > r.swept[from] {
			r.swept[from] = env.GetViewVersion()
			r.notifyLocked()
		}
		r.smu.Unlock()
		return
	}
	r.catchUp(ctx, env.GetViewVersion())
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = r.tracer.start(ctx, "peer "+kindName(msg.Kind), trace.SpanKindServer, msg, attribute.String("agentsilo.from_silo", from))
		defer span.End()
	}
	if err := r.rt.SendRemote(ctx, msg, int(env.GetHops())); err != nil {
		r.log.Debug("one-way message from a peer not delivered", "from", from, "to", msg.GetTo(), "err", err)
	}
}

// release deactivates key for the silo that owns it in view version: once
// this silo's view has caught up, so that it no longer routes key to itself.
func (r *router) release(ctx context.Context, key string, version int64) error {
	if err := r.waitVersion(ctx, version); err != nil {
		return errs.New(codes.Unavailable, "release %s: view %d not reached: %v", key, version, err)
	}
	if r.Route(key) == "" && r.state.Load().self {
		return errs.New(codes.FailedPrecondition, "%s is owned by %s in view %d", key, r.self, r.state.Load().view.Version)
	}
	return r.rt.Release(ctx, key)
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

// agents lists this silo's activations for a peer, as JSON in the reply.
func (r *router) agents(typeName string) (*agentsilov1.AgentMessage, error) {
	b, err := json.Marshal(activationInfos(r.rt.Activations(typeName)))
	if err != nil {
		return nil, errs.New(codes.Internal, "agents: %v", err)
	}
	return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, DataType: "application/json", Data: b}, nil
}

// clusterAgents lists the activations of every silo in the view.
func (r *router) clusterAgents(ctx context.Context, typeName string) ([]ActivationRecord, error) {
	st := r.state.Load()
	out := activationInfos(r.rt.Activations(typeName))
	type part struct {
		recs []ActivationRecord
		err  error
	}
	var peers []MemberInfo
	for _, mi := range st.view.Members {
		if mi.Name != r.self {
			peers = append(peers, mi)
		}
	}
	parts := make(chan part, len(peers))
	for _, mi := range peers {
		go func() {
			reply, err := r.tp.Ask(ctx, mi.PeerAddr, &Envelope{
				Message:     &agentsilov1.AgentMessage{MessageType: msgAgents, Message: typeName, From: r.self},
				ViewVersion: st.view.Version,
			})
			var recs []ActivationRecord
			if err == nil {
				err = json.Unmarshal(reply.GetData(), &recs)
			}
			if err != nil {
				err = errs.New(codes.Unavailable, "agents of silo %s: %v", mi.Name, errs.FromStatus(err))
			}
			parts <- part{recs, err}
		}()
	}
	var errList []error
	for range peers {
		p := <-parts
		out = append(out, p.recs...)
		if p.err != nil {
			errList = append(errList, p.err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, errors.Join(errList...)
}

// ActivationRecord is one activation as silos exchange it.
type ActivationRecord struct {
	Address      string    `json:"address"`
	Silo         string    `json:"silo"`
	ActivatedAt  time.Time `json:"activated_at"`
	LastActive   time.Time `json:"last_active"`
	MailboxDepth int       `json:"mailbox_depth"`
}

func activationInfos(as []grain.ActivationInfo) []ActivationRecord {
	out := make([]ActivationRecord, len(as))
	for i, a := range as {
		out[i] = ActivationRecord{
			Address:      a.Address.String(),
			Silo:         a.Silo,
			ActivatedAt:  a.ActivatedAt,
			LastActive:   a.LastActive,
			MailboxDepth: a.MailboxDepth,
		}
	}
	return out
}

// sessionSilo returns the silo named in a session address's id
// (`Session:owner:<uuid>@<silo>`), or "" if it names none.
func sessionSilo(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	id := addr[i+1:]
	if j := strings.IndexByte(id, '@'); j >= 0 {
		return id[j+1:]
	}
	return ""
}

// sessionRouter delivers messages for client sessions: to the local gateway,
// or through the transport to the silo whose gateway holds the session.
type sessionRouter struct {
	r     *router
	local grain.SessionRouter
}

func (s sessionRouter) DeliverToSession(ctx context.Context, msg *grain.Message) error {
	silo := sessionSilo(msg.To)
	if silo == "" || silo == s.r.self {
		return s.local.DeliverToSession(ctx, msg)
	}
	mi, ok := s.r.state.Load().view.Member(silo)
	if !ok {
		return errs.New(codes.NotFound, "no client session %s: its silo %s is not in the cluster", msg.To, silo)
	}
	return s.r.tp.Send(ctx, mi.PeerAddr, &Envelope{Kind: msg.Kind, Message: msg, Hops: 1})
}

// Members implements ClusterInfo.
func (r *router) Members() ([]*agentsilov1.Member, int64) {
	st := r.state.Load()
	out := make([]*agentsilov1.Member, 0, len(st.view.Members))
	for _, mi := range st.view.Members {
		m := &agentsilov1.Member{
			Name:        mi.Name,
			GatewayAddr: mi.GatewayAddr,
			PeerAddr:    mi.PeerAddr,
			State:       "alive",
			Self:        mi.Name == r.self,
		}
		if mi.Leaving {
			m.State = "leaving"
		}
		if m.Self {
			m.Activations = uint32(max(r.rt.Len(), 0))
		}
		out = append(out, m)
	}
	return out, st.view.Version
}

// Agents implements ClusterInfo.
func (r *router) Agents(ctx context.Context, typeName string) ([]*agentsilov1.ActivationInfo, error) {
	recs, err := r.clusterAgents(ctx, typeName)
	out := make([]*agentsilov1.ActivationInfo, len(recs))
	for i, a := range recs {
		out[i] = &agentsilov1.ActivationInfo{
			Address:      a.Address,
			Silo:         a.Silo,
			ActivatedAt:  timestamppb.New(a.ActivatedAt),
			LastActive:   timestamppb.New(a.LastActive),
			MailboxDepth: uint32(max(a.MailboxDepth, 0)),
		}
	}
	return out, err
}

// owns reports whether this silo fires the reminders of addr.
func (r *router) owns(addr grain.Address) bool {
	return r.state.Load().self && r.Route(addr.String()) == ""
}
