package cluster

// Client sessions across silos. A session's address names the silo whose
// gateway opened it, `Session:owner:<uuid>@<silo>`, and while that silo is
// in the view its messages go straight there (the fast path), acknowledged:
// the sender learns of a full backlog (ResourceExhausted) or an unknown
// session (NotFound).
//
// So that a session outlives that silo, each session has a fallback holder:
// the rendezvous owner of the session's address among the view's members
// other than the silo the address names (fallbackOf). It is the same silo
// whether the named silo is alive or not, so it can be told of the session
// while the named silo lives. The gateway registers each session it opens
// with it (principal, SHA-256 of the resume token, the silo holding it: a
// sessionRecord). While the silo holding the session is out of the view,
// the fallback holder keeps the session's pushes in a bounded buffer (the
// gateway's backlog bounds: SessionBacklog messages, SessionBacklogBytes,
// SessionBacklogAge after the holder left; beyond them the sender gets
// ResourceExhausted). A client that re-attaches through any gateway with
// the session's address and resume token makes that gateway adopt the
// session: the fallback holder checks principal and token, has a live silo
// that still holds the session give it up (msgSessionRelease: its queued
// pushes go to the adopting gateway first), delivers the buffer to the
// adopting gateway in order, and from then on forwards the session's
// messages there; the address does not change. A silo that gave a session
// up, or restarted, sends what it gets for it on to the fallback holder. The adopting silo
// registers in turn, so a later loss of it is survived the same way. When
// the fallback holder changes with the view, the silos holding sessions
// register them with the new one (Sessions.Rehome).
//
// What is lost: the pushes the dead silo's gateway held and had not written
// to the client (they were acknowledged to their senders), and, if the
// fallback holder dies while the session's holder is out of the view, the
// session itself (its buffer and record): the client then gets a new
// session, as before.
//
// Peer messages: a push travels as the message itself, in a request to the
// peer (no wrapping, so a message of the maximum size passes); the
// registration, adoption, release and forgetting are runtime messages
// (msgSessionRegister, msgSessionAdopt, msgSessionRelease,
// msgSessionForget).

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The runtime messages of surviving sessions; To is the session's address.
const (
	// msgSessionRegister: the sender holds the session; Message is its
	// principal, Data the SHA-256 of its resume token.
	msgSessionRegister = grain.ReservedPrefix + "session.register"
	// msgSessionAdopt: the sender adopts the session; Message is the
	// principal, Data the resume token the client presented.
	msgSessionAdopt = grain.ReservedPrefix + "session.adopt"
	// msgSessionForget (one-way): the sender holds the session no longer.
	msgSessionForget = grain.ReservedPrefix + "session.forget"
	// msgSessionRelease (from the fallback holder to the silo holding the
	// session): give the session up to the silo named in Message, and
	// deliver the pushes queued for it there, in order, before answering.
	msgSessionRelease = grain.ReservedPrefix + "session.release"
)

// defaultMaxKeptSessions bounds the session records one silo keeps as a
// fallback holder (see sessionKeeper); past it a registration is refused
// and that session does not survive its silo.
const defaultMaxKeptSessions = 100000

// releaseTimeout bounds the release of a session by a live silo: one that
// hangs is not waited for longer (the client tries again; once the view
// drops that silo, the session is adopted without it).
const releaseTimeout = 2 * time.Second

// pushTimeout bounds a push to another silo when its sender set no
// deadline.
const pushTimeout = 30 * time.Second

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

// isSessionAddr reports whether to is a client session's address.
func isSessionAddr(to string) bool {
	return strings.HasPrefix(to, grain.SessionType+":")
}

// fallbackOf returns the fallback holder of the session at addr in view v:
// the owner of addr among the members that own addresses, less the silo
// addr names. "" if there is none.
func fallbackOf(addr string, v membership.View) string {
	named := sessionSilo(addr)
	owners := v.Owners()
	others := owners[:0]
	for _, o := range owners {
		if o != named {
			others = append(others, o)
		}
	}
	return Owner(addr, others)
}

// fallbackIn is fallbackOf in st's view, by st's owner table: the owner of
// addr among all the owners is its fallback holder unless it is the silo
// addr names (removing a member that does not own addr leaves its owner
// where it is), so only then are the others hashed.
func fallbackIn(addr string, st *routeState) string {
	named := sessionSilo(addr)
	if o := st.table.owner(addr); o != named {
		return o
	}
	return fallbackOf(addr, st.view)
}

// sessionRouter delivers messages for client sessions: to the local
// gateway, to the silo whose gateway holds a session, or, while that silo
// is out of the view, to the session's fallback holder. It is the
// runtime's siloapi.SessionRouter, and answers the pushes peers send.
type sessionRouter struct {
	r     *router
	local siloapi.SessionRouter
	keep  *sessionKeeper
	bg    sync.WaitGroup // receive's goroutines
}

// DeliverToSession implements siloapi.SessionRouter.
func (s *sessionRouter) DeliverToSession(ctx context.Context, msg *agentsilov1.AgentMessage) error {
	return s.route(ctx, msg, 0)
}

// route delivers msg, which has passed hops silos.
func (s *sessionRouter) route(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) error {
	silo := sessionSilo(msg.To)
	if silo == "" {
		return s.local.DeliverToSession(ctx, msg)
	}
	st := s.r.state.Load()
	view := st.view
	if silo == s.r.self {
		err := s.local.DeliverToSession(ctx, msg)
		if errs.Code(err) != codes.NotFound {
			return err
		}
		// Not here: this silo restarted since it opened the session, which
		// another silo may have adopted meanwhile. Its fallback holder knows.
		f := fallbackIn(msg.To, st)
		if f == "" || hops+1 >= maxHops {
			return err
		}
		return s.ask(ctx, f, view, msg, hops+1)
	}
	if _, ok := view.Member(silo); ok {
		return s.ask(ctx, silo, view, msg, hops+1)
	}
	f := fallbackIn(msg.To, st)
	switch {
	case f == "":
		return errs.New(codes.NotFound, "no client session %s: its silo %s is not in the cluster", protocol.Clip(msg.To), silo)
	case f == s.r.self:
		return s.keep.deliver(ctx, msg)
	}
	return s.ask(ctx, f, view, msg, hops+1)
}

// ask sends msg to silo as a request with hops, and waits for its answer.
func (s *sessionRouter) ask(ctx context.Context, silo string, view membership.View, msg *agentsilov1.AgentMessage, hops int) error {
	mi, ok := view.Member(silo)
	if !ok {
		return errs.New(codes.Unavailable, "client session %s: silo %s is not in the cluster", protocol.Clip(msg.To), silo)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pushTimeout)
		defer cancel()
	}
	_, err := s.r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{Message: msg, Hops: uint32(hops), ViewVersion: view.Version})
	return errs.FromStatus(err)
}

// receive is what a silo does with a push a peer sent it (from, with hops):
// a push the fallback holder hands on (hops maxHops) is for this silo's
// gateway alone; one the silo named in its address sends on (it no longer
// holds the session) is for the fallback holder; any other is routed as
// here. sync is called with the outcome; delivery to the local gateway
// happens before receive returns (so pushes from one peer keep their
// order), anything that waits on another silo on a goroutine of its own.
func (s *sessionRouter) receive(ctx context.Context, from string, env *transport.Envelope, done func(error)) {
	msg := env.GetMessage()
	hops := int(env.GetHops())
	if hops >= maxHops {
		done(s.local.DeliverToSession(ctx, msg))
		return
	}
	s.r.catchUp(ctx, env.GetViewVersion())
	if silo := sessionSilo(msg.To); silo == s.r.self {
		err := s.local.DeliverToSession(ctx, msg)
		if errs.Code(err) != codes.NotFound {
			done(err)
			return
		}
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if from == sessionSilo(msg.To) {
			if f := fallbackIn(msg.To, s.r.state.Load()); f != s.r.self {
				done(errs.New(codes.Unavailable, "client session %s: its fallback holder is %s, not %s", protocol.Clip(msg.To), f, s.r.self))
				return
			}
			done(s.keep.deliver(ctx, msg))
			return
		}
		done(s.route(ctx, msg, hops))
	}()
}

// sessionKeeper is a silo's part as the fallback holder of sessions: a
// record of each session registered with it, and the pushes it keeps for
// those whose holder is out of the view. Its table is bounded (max records;
// a record whose holder left the view expires SessionBacklogAge later, and
// one whose holder lives is forgotten when the holder forgets the session)
// and so is each buffer. Methods are safe for concurrent use.
type sessionKeeper struct {
	self         string
	r            *router
	local        siloapi.SessionRouter
	gw           *gateway.Sessions // the sessions this silo's gateway holds
	clk          clock.Clock
	log          *slog.Logger
	backlog      int
	backlogBytes int
	age          time.Duration
	max          int

	mu   sync.Mutex
	recs map[string]*sessionRecord
}

// sessionRecord is a kept session.
type sessionRecord struct {
	principal string
	tokenHash [sha256.Size]byte
	holder    string // the silo whose gateway holds the session
	lease     int64  // holder's lease when it registered: a restarted holder is another
	lostAt    time.Time
	buf       []*agentsilov1.AgentMessage // pushes kept while no live silo holds the session
	bufBytes  int
	handing   bool // the buffer is being delivered to holder (adopt)
}

func newSessionKeeper(r *router, local siloapi.SessionRouter, gw *gateway.Sessions, cfg gateway.Config, clk clock.Clock, log *slog.Logger) *sessionKeeper {
	return &sessionKeeper{
		self:         r.self,
		r:            r,
		local:        local,
		gw:           gw,
		clk:          clk,
		log:          log,
		backlog:      cfg.SessionBacklog,
		backlogBytes: cfg.Limits.SessionBacklogBytes,
		age:          cfg.SessionBacklogAge,
		max:          defaultMaxKeptSessions,
		recs:         make(map[string]*sessionRecord),
	}
}

// live reports whether rec's holder is in view v, as the silo that
// registered (not one restarted under its name).
func (rec *sessionRecord) live(v membership.View) bool {
	mi, ok := v.Member(rec.holder)
	return ok && !mi.Leaving && (rec.lease == 0 || mi.LeaseID == rec.lease)
}

// deliver takes msg for a session kept here: to its live holder, or into
// its buffer.
func (k *sessionKeeper) deliver(ctx context.Context, msg *agentsilov1.AgentMessage) error {
	if err := protocol.CheckMessage(msg); err != nil {
		return err
	}
	view := k.r.state.Load().view
	k.mu.Lock()
	rec := k.recs[msg.To]
	if rec == nil {
		k.mu.Unlock()
		return errs.New(codes.NotFound, "no client session %s: its silo %s is not in the cluster, and no silo keeps its messages", protocol.Clip(msg.To), sessionSilo(msg.To))
	}
	if !rec.handing && len(rec.buf) == 0 && rec.live(view) {
		holder := rec.holder
		k.mu.Unlock()
		return k.handTo(ctx, holder, view, msg)
	}
	if len(rec.buf) >= k.backlog {
		k.mu.Unlock()
		return errs.New(codes.ResourceExhausted, "client session %s is detached with %d messages kept for it (the limit)", protocol.Clip(msg.To), len(rec.buf))
	}
	n := proto.Size(msg)
	if len(rec.buf) > 0 && rec.bufBytes+n > k.backlogBytes {
		k.mu.Unlock()
		return errs.New(codes.ResourceExhausted, "client session %s is detached with %d bytes of messages kept for it", protocol.Clip(msg.To), rec.bufBytes)
	}
	if rec.lostAt.IsZero() && !rec.live(view) {
		rec.lostAt = k.clk.Now()
	}
	rec.buf = append(rec.buf, msg)
	rec.bufBytes += n
	k.mu.Unlock()
	return nil
}

// handTo delivers msg to the gateway of silo, which holds its session.
func (k *sessionKeeper) handTo(ctx context.Context, silo string, view membership.View, msg *agentsilov1.AgentMessage) error {
	if silo == k.self {
		return k.local.DeliverToSession(ctx, msg)
	}
	mi, ok := view.Member(silo)
	if !ok {
		return errs.New(codes.Unavailable, "client session %s: silo %s is not in the cluster", protocol.Clip(msg.To), silo)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pushTimeout)
		defer cancel()
	}
	_, err := k.r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{Message: msg, Hops: maxHops, ViewVersion: view.Version})
	return errs.FromStatus(err)
}

// checkSession validates a session address and its principal as a peer
// sent them.
func checkSession(addr, principal string) error {
	a, err := grain.ParseAddress(addr)
	if err != nil {
		return err
	}
	if a.Type != grain.SessionType || a.Owner != principal {
		return errs.New(codes.InvalidArgument, "%s is not a client session of %s", protocol.Clip(addr), protocol.Clip(principal))
	}
	return nil
}

// register records that silo from holds the session at addr.
func (k *sessionKeeper) register(from, addr, principal string, tokenHash []byte) error {
	if err := checkSession(addr, principal); err != nil {
		return err
	}
	if len(tokenHash) != sha256.Size {
		return errs.New(codes.InvalidArgument, "register %s: a token hash of %d bytes", protocol.Clip(addr), len(tokenHash))
	}
	mi, ok := k.r.state.Load().view.Member(from)
	if !ok {
		return errs.New(codes.Unavailable, "register %s: silo %s is not in the view", protocol.Clip(addr), from)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	rec := k.recs[addr]
	if rec == nil {
		if len(k.recs) >= k.max {
			return errs.New(codes.ResourceExhausted, "silo %s keeps %d client sessions (its limit)", k.self, len(k.recs))
		}
		rec = &sessionRecord{principal: principal}
		k.recs[addr] = rec
	}
	if rec.principal != principal {
		return errs.New(codes.PermissionDenied, "register %s: the session belongs to another principal", protocol.Clip(addr))
	}
	copy(rec.tokenHash[:], tokenHash)
	rec.holder, rec.lease, rec.lostAt = from, mi.LeaseID, time.Time{}
	return nil
}

// adopt hands the session at addr over to silo from, for principal
// presenting token: it checks both against the record, has a live holder
// other than from give the session up (it delivers its queued pushes to
// from), delivers the buffer to from's gateway in order (pushes that
// arrive meanwhile join the buffer), and makes from the holder. An
// adoption already under way refuses another (FailedPrecondition). A live
// holder that does not answer the release (dead, not yet out of the view)
// leaves the session where it was: Aborted, once principal and token are
// checked, so the adopting gateway may serve the client meanwhile and try
// again.
func (k *sessionKeeper) adopt(ctx context.Context, from, addr, principal string, token []byte) error {
	if err := checkSession(addr, principal); err != nil {
		return err
	}
	view := k.r.state.Load().view
	mi, ok := view.Member(from)
	if !ok {
		return errs.New(codes.Unavailable, "adopt %s: silo %s is not in the view", protocol.Clip(addr), from)
	}
	k.mu.Lock()
	rec := k.recs[addr]
	switch {
	case rec == nil:
		k.mu.Unlock()
		return errs.New(codes.NotFound, "no silo keeps client session %s", protocol.Clip(addr))
	case rec.principal != principal:
		k.mu.Unlock()
		return errs.New(codes.PermissionDenied, "resume %s: the session belongs to another principal", protocol.Clip(addr))
	}
	h := sha256.Sum256(token)
	if subtle.ConstantTimeCompare(h[:], rec.tokenHash[:]) != 1 {
		k.mu.Unlock()
		return errs.New(codes.PermissionDenied, "resume %s: wrong resume token", protocol.Clip(addr))
	}
	if rec.handing {
		k.mu.Unlock()
		return errs.New(codes.FailedPrecondition, "resume %s: the session is being handed over to silo %s", protocol.Clip(addr), rec.holder)
	}
	prev, prevLease, release := rec.holder, rec.lease, rec.holder != from && rec.live(view)
	rec.holder, rec.lease, rec.lostAt, rec.handing = from, mi.LeaseID, time.Time{}, true
	k.mu.Unlock()
	if release {
		// The client re-attached elsewhere (its stream to prev broke, or
		// prev is shutting down): prev gives the session up, with what it
		// queued, before the buffer (pushes that came here meanwhile) is
		// handed over.
		rctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		err := k.release(rctx, prev, addr, from, view)
		cancel()
		if err != nil && errs.Code(err) != codes.NotFound {
			k.mu.Lock()
			rec.holder, rec.lease, rec.handing = prev, prevLease, false
			k.mu.Unlock()
			return errs.New(codes.Aborted, "resume %s: silo %s did not give the session up yet: %w", protocol.Clip(addr), prev, err)
		}
	}
	for {
		k.mu.Lock()
		if k.recs[addr] != rec { // expired meanwhile: cannot happen while handing, but be safe
			k.mu.Unlock()
			return errs.New(codes.NotFound, "no silo keeps client session %s", protocol.Clip(addr))
		}
		if len(rec.buf) == 0 {
			rec.handing = false
			k.mu.Unlock()
			return nil
		}
		m := rec.buf[0]
		k.mu.Unlock()
		if err := k.handTo(ctx, from, k.r.state.Load().view, m); err != nil {
			k.mu.Lock()
			rec.handing = false
			k.mu.Unlock()
			return errs.New(codes.Unavailable, "resume %s: handing its messages over broke off: %w", protocol.Clip(addr), err)
		}
		k.mu.Lock()
		rec.buf[0] = nil
		rec.buf = rec.buf[1:]
		rec.bufBytes -= proto.Size(m)
		k.mu.Unlock()
	}
}

// release asks silo holder to give the session at addr up to silo to.
func (k *sessionKeeper) release(ctx context.Context, holder, addr, to string, view membership.View) error {
	msg := &agentsilov1.AgentMessage{MessageType: msgSessionRelease, To: addr, Message: to, From: k.self}
	if holder == k.self {
		return k.released(ctx, msg)
	}
	mi, ok := view.Member(holder)
	if !ok {
		return errs.New(codes.Unavailable, "silo %s is not in the view", holder)
	}
	_, err := k.r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{Message: msg, ViewVersion: view.Version})
	return errs.FromStatus(err)
}

// released gives up the session of a msgSessionRelease: this silo's
// gateway forgets it, and the pushes it had queued go, in order, to the
// silo adopting it. If one cannot be delivered, it and the ones after it
// are lost (and logged).
func (k *sessionKeeper) released(ctx context.Context, msg *agentsilov1.AgentMessage) error {
	addr, to := msg.GetTo(), msg.GetMessage()
	if k.gw == nil {
		return errs.New(codes.NotFound, "no client session %s", protocol.Clip(addr))
	}
	pushes, err := k.gw.Release(addr)
	if err != nil {
		return err
	}
	view := k.r.state.Load().view
	for i, m := range pushes {
		if err := k.handTo(ctx, to, view, m); err != nil {
			k.log.Warn("client session given up: pushes lost on their way to the silo adopting it", "session", addr, "to", to, "lost", len(pushes)-i, "err", err)
			return errs.New(codes.Unavailable, "handing %s over to %s: %w", protocol.Clip(addr), to, err)
		}
	}
	return nil
}

// forget drops the record of addr if from holds it and nothing is kept.
func (k *sessionKeeper) forget(from, addr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rec := k.recs[addr]; rec != nil && rec.holder == from && !rec.handing && len(rec.buf) == 0 {
		delete(k.recs, addr)
	}
}

// observe notes, for a new view, the records whose holder left it.
func (k *sessionKeeper) observe(v membership.View) {
	now := k.clk.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, rec := range k.recs {
		if rec.lostAt.IsZero() && !rec.live(v) {
			rec.lostAt = now
		}
	}
}

// sweep forgets the records whose holder left the view longer than
// SessionBacklogAge ago, with what they keep.
func (k *sessionKeeper) sweep() {
	now := k.clk.Now()
	view := k.r.state.Load().view
	k.mu.Lock()
	defer k.mu.Unlock()
	for addr, rec := range k.recs {
		if rec.handing {
			continue
		}
		if rec.live(view) && len(rec.buf) == 0 {
			rec.lostAt = time.Time{}
			continue
		}
		if rec.lostAt.IsZero() {
			rec.lostAt = now
		}
		if now.Sub(rec.lostAt) > k.age {
			delete(k.recs, addr)
		}
	}
}

// len returns the number of records kept.
func (k *sessionKeeper) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.recs)
}

// sessionHome is the silo's gateway.SessionHome: it reaches the fallback
// holder of a session, here or over the transport.
type sessionHome struct {
	r    *router
	keep *sessionKeeper
}

var _ gateway.SessionHome = sessionHome{}

// homeID names the fallback holder f of view v to the gateway's sessions
// (gateway.SessionHome's home): its name and lease, so that a fallback
// holder restarted under the same name, which keeps nothing, is another.
func homeID(f string, v membership.View) string {
	if f == "" {
		return ""
	}
	mi, _ := v.Member(f)
	return f + "#" + strconv.FormatInt(mi.LeaseID, 16)
}

// homeName returns the silo name of a homeID.
func homeName(id string) string {
	name, _, _ := strings.Cut(id, "#")
	return name
}

// Register implements gateway.SessionHome.
func (h sessionHome) Register(ctx context.Context, addr, principal string, tokenHash [sha256.Size]byte) (string, error) {
	st := h.r.state.Load()
	view := st.view
	f := fallbackIn(addr, st)
	switch f {
	case "":
		return "", nil
	case h.r.self:
		return homeID(f, view), h.keep.register(h.r.self, addr, principal, tokenHash[:])
	}
	return homeID(f, view), h.ask(ctx, f, view, &agentsilov1.AgentMessage{MessageType: msgSessionRegister, To: addr, Message: principal, Data: tokenHash[:], From: h.r.self})
}

// Adopt implements gateway.SessionHome.
func (h sessionHome) Adopt(ctx context.Context, addr, principal, token string) (string, error) {
	st := h.r.state.Load()
	view := st.view
	f := fallbackIn(addr, st)
	switch f {
	case "":
		return "", errs.New(codes.NotFound, "no silo keeps client session %s", protocol.Clip(addr))
	case h.r.self:
		return homeID(f, view), h.keep.adopt(ctx, h.r.self, addr, principal, []byte(token))
	}
	return homeID(f, view), h.ask(ctx, f, view, &agentsilov1.AgentMessage{MessageType: msgSessionAdopt, To: addr, Message: principal, Data: []byte(token), From: h.r.self})
}

// Forget implements gateway.SessionHome.
func (h sessionHome) Forget(home, addr string) {
	name := homeName(home)
	if name == h.r.self {
		h.keep.forget(h.r.self, addr)
		return
	}
	view := h.r.state.Load().view
	mi, ok := view.Member(name)
	if !ok || homeID(name, view) != home {
		return // gone: it kept the record no longer, or it expires there
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.r.tp.Send(ctx, mi.PeerAddr, &transport.Envelope{
		Message:     &agentsilov1.AgentMessage{MessageType: msgSessionForget, To: addr, From: h.r.self},
		ViewVersion: view.Version,
	})
	if err != nil {
		h.r.log.Debug("client session not forgotten by its fallback holder", "session", addr, "holder", home, "err", err)
	}
}

func (h sessionHome) ask(ctx context.Context, silo string, view membership.View, msg *agentsilov1.AgentMessage) error {
	mi, ok := view.Member(silo)
	if !ok {
		return errs.New(codes.Unavailable, "silo %s is not in the view", silo)
	}
	_, err := h.r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{Message: msg, ViewVersion: view.Version})
	return errs.FromStatus(err)
}

// sessionsFollowViews is the view observer that keeps sessions surviving
// their silo: the keeper notes holders that left, and the gateway's
// sessions register with their new fallback holders (on a goroutine of its
// own, one round at a time; rounds asked for meanwhile coalesce).
type sessionsFollowViews struct {
	r        *router
	keep     *sessionKeeper
	sessions *gateway.Sessions
	route    *sessionRouter
	kick     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newSessionsFollowViews(r *router, keep *sessionKeeper, sessions *gateway.Sessions, route *sessionRouter) *sessionsFollowViews {
	f := &sessionsFollowViews{r: r, keep: keep, sessions: sessions, route: route, kick: make(chan struct{}, 1)}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// observe is the views observer.
func (f *sessionsFollowViews) observe(_, cur membership.View) {
	f.keep.observe(cur)
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// start runs the re-registrations and the keeper's sweep until stop.
func (f *sessionsFollowViews) start() {
	every := min(max(f.keep.age/4, 10*time.Millisecond), 30*time.Second)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := f.r.clk.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C():
				f.keep.sweep()
				t.Reset(every)
				f.rehome() // adoptions left unfinished
			case <-f.kick:
				f.rehome()
			}
		}
	}()
}

// rehome registers the sessions whose fallback holder changed, and tries
// again the adoptions left unfinished.
func (f *sessionsFollowViews) rehome() {
	f.sessions.Rehome(f.ctx, func(addr string) string {
		st := f.r.state.Load()
		return homeID(fallbackIn(addr, st), st.view)
	})
}

// stop ends what start started; it may be called without start.
func (f *sessionsFollowViews) stop() {
	f.cancel()
	f.wg.Wait()
}

// wait waits for the pushes peers sent that are being handed on; once the
// transport is closed, they end.
func (f *sessionsFollowViews) wait() { f.route.bg.Wait() }
