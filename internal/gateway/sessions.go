package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Sessions holds a gateway's client sessions and their backlogs. It is the
// runtime's siloapi.SessionRouter (directly on a single silo, or behind the
// cluster's router, which forwards to the silo holding a session), so it is
// made before the runtime, and the gateway that serves the sessions' streams
// after it. Its methods are safe for concurrent use.
type Sessions struct {
	backlog      int
	backlogBytes int
	age          time.Duration
	perPrincipal int    // Limits.MaxSessionsPerPrincipal
	silo         string // named in session ids, so other silos route here; "" on a lone silo

	// home, if set (SetHome, before the gateway serves), keeps what lets
	// the sessions survive this silo; log tells of registrations it refused.
	home SessionHome
	log  *slog.Logger

	// mu guards m and count; it is taken before a session's mu, never
	// after.
	mu    sync.RWMutex
	m     map[string]*session
	count map[string]int // sessions in m per principal

	// forgotten, if set (by New), is told of each session forgotten, with
	// ss.mu held: it must not block.
	forgotten func(addr string)
}

// Attached reports whether this gateway holds the session at addr (ok) and
// whether a client stream is attached to it.
func (ss *Sessions) Attached(addr string) (attached, ok bool) {
	ss.mu.RLock()
	s := ss.m[addr]
	ss.mu.RUnlock()
	if s == nil {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.att != nil, true
}

// SessionHome keeps, away from the silo whose gateway holds a session, what
// lets the session outlive that silo: a record of the session (its principal
// and a hash of its resume token) with the session's fallback holder, which
// keeps the session's pushes while no live silo holds it, and hands them
// over to the gateway the client re-attaches through. The cluster
// implements it; a lone silo has none. Its methods are called concurrently,
// from any goroutine, never with a lock of Sessions held.
type SessionHome interface {
	// Register records, with the fallback holder of the session addr of
	// principal, that this silo holds it; tokenHash is the SHA-256 of its
	// resume token. It returns the fallback holder's name (an opaque id:
	// a holder restarted under its name has another), "" if there is none
	// (no other silo).
	Register(ctx context.Context, addr, principal string, tokenHash [sha256.Size]byte) (string, error)
	// Adopt asks the fallback holder of addr to hand the session over to
	// this silo, whose Sessions already holds it (not adopted yet), for
	// principal presenting token. When it returns nil the holder has
	// delivered (DeliverToSession) every push it kept, in order, and sends
	// the later ones here. NotFound: no silo keeps the session (nothing was
	// handed); PermissionDenied: the token or the principal is not the
	// session's (nothing was handed); Unavailable: another live silo holds
	// the session, or the hand-over broke off (part may have been handed).
	Adopt(ctx context.Context, addr, principal, token string) (string, error)
	// Forget tells home, the fallback holder addr was registered with,
	// that this silo holds the session no longer. It may drop the news.
	Forget(home, addr string)
}

// SetHome makes the sessions survive this silo through h (see
// SessionHome). It is called once, before the gateway serves.
func (ss *Sessions) SetHome(h SessionHome, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ss.home, ss.log = h, log
}

// adoptTimeout bounds an adoption (the fallback holder hands over up to a
// backlog of pushes) while a client waits for its Welcome; registerTimeout
// bounds a registration, which a new session's Welcome waits for: a
// fallback holder that hangs, until the view drops it, delays new sessions
// by that much (their registration is tried again at the next view
// change).
const (
	adoptTimeout    = 10 * time.Second
	registerTimeout = 2 * time.Second
)

// NewSessions returns the sessions of a gateway configured by cfg: backlogs
// of cfg.SessionBacklog messages kept cfg.SessionBacklogAge. silo, if not
// empty, is named in the session addresses, so that the other silos of a
// cluster route the sessions' messages here. It starts nothing; the
// gateway's Serve sweeps expired sessions.
func NewSessions(cfg Config, silo string) (*Sessions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sessions{
		backlog:      cfg.SessionBacklog,
		backlogBytes: cfg.Limits.SessionBacklogBytes,
		age:          cfg.SessionBacklogAge,
		perPrincipal: cfg.Limits.MaxSessionsPerPrincipal,
		silo:         silo,
		m:            make(map[string]*session),
		count:        make(map[string]int),
	}, nil
}

// removeLocked forgets s, and returns it if it was held (to be told to its
// home, see forget, once ss.mu is let go). ss.mu is held.
func (ss *Sessions) removeLocked(s *session) *session {
	if ss.dropLocked(s) == nil {
		return nil
	}
	if ss.forgotten != nil {
		ss.forgotten(s.addr)
	}
	return s
}

// dropLocked forgets s here without ending it: Release, for a session that
// lives on at another gateway (its topic subscriptions with it). ss.mu is
// held.
func (ss *Sessions) dropLocked(s *session) *session {
	if ss.m[s.addr] != s {
		return nil
	}
	delete(ss.m, s.addr)
	if ss.count[s.principal]--; ss.count[s.principal] <= 0 {
		delete(ss.count, s.principal)
	}
	return s
}

// forget tells the home of each of removed (nil ones skipped) that this
// silo holds it no longer. ss.mu is not held.
func (ss *Sessions) forget(removed ...*session) {
	if ss.home == nil {
		return
	}
	for _, s := range removed {
		if s == nil {
			continue
		}
		s.mu.Lock()
		home := s.home
		s.mu.Unlock()
		if home != "" {
			ss.home.Forget(home, s.addr)
		}
	}
}

// makeRoomLocked makes room for one more session of principal p: at the
// limit, the session of p detached longest is forgotten, with its backlog
// (and returned, for forget); with every one attached, it is
// ResourceExhausted. ss.mu is held.
func (ss *Sessions) makeRoomLocked(p string) (*session, error) {
	if ss.count[p] < ss.perPrincipal {
		return nil, nil
	}
	var oldest *session
	var since time.Time
	for _, s := range ss.m {
		if s.principal != p {
			continue
		}
		s.mu.Lock()
		if s.att == nil && s.opening == 0 && (oldest == nil || s.detachedAt.Before(since)) {
			oldest, since = s, s.detachedAt
		}
		s.mu.Unlock()
	}
	if oldest == nil {
		return nil, errs.New(codes.ResourceExhausted, "principal %s holds %d attached sessions (the gateway's limit)", p, ss.count[p])
	}
	return ss.removeLocked(oldest), nil
}

// open finds the session hello resumes, held here or adopted from its
// fallback holder (when its gateway's silo is gone), or opens a new one.
// The session it returns counts as opening (see session.opening) until the
// stream attaches to it: found, made or adopted under ss.mu, it cannot be
// replaced to make room for another session before that, so a principal's
// sessions that serve never outnumber its limit.
func (ss *Sessions) open(ctx context.Context, c *acl.Caller, hello *agentsilov1.Hello) (*session, bool, error) {
	p := c.Principal
	if addr := hello.GetResumeAddress(); addr != "" {
		ss.mu.Lock()
		s := ss.m[addr]
		var removed *session
		var refused error
		if held := s; held != nil {
			held.mu.Lock()
			switch {
			case ss.expired(s, time.Now()):
				removed = ss.removeLocked(s)
				s = nil
			case subtle.ConstantTimeCompare([]byte(s.token), []byte(hello.GetResumeToken())) != 1:
				refused = errs.New(codes.PermissionDenied, "resume %s: wrong resume token", protocol.Clip(addr))
			case s.principal != p:
				refused = errs.New(codes.PermissionDenied, "resume %s: the session belongs to another principal", protocol.Clip(addr))
			default:
				s.opening++
				s.caller.Store(c) // the resuming stream's credentials from now on
			}
			held.mu.Unlock()
		}
		ss.mu.Unlock()
		ss.forget(removed)
		if refused != nil {
			return nil, false, refused
		}
		if s != nil {
			s.mu.Lock()
			adopted := s.adopted
			s.mu.Unlock()
			if !adopted {
				// An adoption not finished: its fallback holder still keeps
				// the rest of its pushes, or the silo that held it has not
				// given it up yet. Served meanwhile (the token was checked
				// when the adoption started); Rehome tries again.
				if err := ss.adoptFrom(ctx, s); errs.Code(err) == codes.NotFound {
					ss.drop(s)
					return nil, false, err
				}
			}
			return s, true, nil
		}
		if ss.home != nil {
			s, err := ss.adopt(ctx, c, hello)
			if err == nil {
				return s, true, nil
			}
			if errs.Code(err) != codes.NotFound {
				return nil, false, err
			}
		}
		// Unknown or expired: a new session, and Welcome says resumed=false.
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, false, errs.New(codes.Internal, "resume token: %w", err)
	}
	id := grain.NewID()
	if ss.silo != "" && len(id)+1+len(ss.silo) <= 128 {
		id += "@" + ss.silo // other silos route the session's messages here
	}
	s := &session{
		addr:       grain.SessionType + ":" + p + ":" + id,
		principal:  p,
		token:      hex.EncodeToString(tok[:]),
		detachedAt: time.Now(),
		adopted:    true,
		opening:    1,
	}
	s.caller.Store(c)
	ss.mu.Lock()
	removed, err := ss.makeRoomLocked(p)
	if err == nil {
		ss.m[s.addr] = s
		ss.count[p]++
	}
	ss.mu.Unlock()
	ss.forget(removed)
	if err != nil {
		return nil, false, err
	}
	ss.register(ctx, s)
	return s, false, nil
}

// register records s with its fallback holder, so that it survives this
// silo. A session it could not register works, but dies with this silo
// unless a later view change registers it (Rehome).
func (ss *Sessions) register(ctx context.Context, s *session) {
	if ss.home == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	home, err := ss.home.Register(ctx, s.addr, s.principal, sha256.Sum256([]byte(s.token)))
	if err != nil {
		ss.log.Warn("client session not registered with its fallback holder: it does not survive this silo until a view change registers it", "session", s.addr, "err", err)
		return
	}
	s.mu.Lock()
	s.home = home
	s.mu.Unlock()
}

// adopt takes over, from its fallback holder, the session hello resumes,
// which this gateway does not hold: its gateway's silo is gone (or
// restarted). Only the session's principal presenting its resume token may:
// the holder checks the token against the hash the session registered.
func (ss *Sessions) adopt(ctx context.Context, c *acl.Caller, hello *agentsilov1.Hello) (*session, error) {
	addr := hello.GetResumeAddress()
	a, err := grain.ParseAddress(addr)
	if err != nil || a.Type != grain.SessionType {
		return nil, errs.New(codes.NotFound, "no client session %s", protocol.Clip(addr))
	}
	if a.Owner != c.Principal {
		return nil, errs.New(codes.PermissionDenied, "resume %s: the session belongs to another principal", protocol.Clip(addr))
	}
	s := &session{
		addr:       addr,
		principal:  c.Principal,
		token:      hello.GetResumeToken(),
		detachedAt: time.Now(),
		opening:    1,
	}
	s.caller.Store(c)
	ss.mu.Lock()
	if ss.m[addr] != nil {
		ss.mu.Unlock()
		return nil, errs.New(codes.Unavailable, "resume %s: another stream is resuming it on this gateway", protocol.Clip(addr))
	}
	removed, err := ss.makeRoomLocked(c.Principal)
	if err == nil {
		ss.m[addr] = s
		ss.count[c.Principal]++
	}
	ss.mu.Unlock()
	ss.forget(removed)
	if err != nil {
		return nil, err
	}
	switch err := ss.adoptFrom(ctx, s); errs.Code(err) {
	case codes.OK:
		return s, nil
	case codes.Aborted:
		// Principal and token checked, but the silo that holds the
		// session (dead, and not yet out of the view) did not give it up:
		// the client is served meanwhile, from the same address, and
		// Rehome tries the adoption again; the pushes kept for it come
		// then, in order.
		return s, nil
	case codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition:
		// Nothing was handed over: this gateway never held it.
		ss.drop(s)
		return nil, err
	default:
		// Part may have been handed over: s keeps it, and resuming s here
		// asks for the rest; meanwhile it ages as a detached session.
		s.mu.Lock()
		s.opening--
		s.detachedAt = time.Now()
		s.mu.Unlock()
		return nil, err
	}
}

// drop forgets s, which this gateway never held for good.
func (ss *Sessions) drop(s *session) {
	ss.mu.Lock()
	ss.removeLocked(s)
	ss.mu.Unlock()
}

// adoptFrom asks s's fallback holder to hand s over to this silo.
func (ss *Sessions) adoptFrom(ctx context.Context, s *session) error {
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	home, err := ss.home.Adopt(ctx, s.addr, s.principal, s.token)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.adopted, s.home = true, home
	s.mu.Unlock()
	return nil
}

// Release gives up the session at addr, which another silo adopts: the
// session is forgotten here (a stream still attached to it gets nothing
// more: its client re-attached elsewhere), and the pushes queued for it are
// returned, in order, for the adopting silo. NotFound if this gateway does
// not hold it.
func (ss *Sessions) Release(addr string) ([]*agentsilov1.AgentMessage, error) {
	ss.mu.Lock()
	s := ss.m[addr]
	if s != nil {
		ss.dropLocked(s)
	}
	ss.mu.Unlock()
	if s == nil {
		return nil, errs.New(codes.NotFound, "no client session %s", protocol.Clip(addr))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var pushes []*agentsilov1.AgentMessage
	for _, f := range s.queue {
		if f.att == nil {
			pushes = append(pushes, f.frame.GetPush())
		}
	}
	clear(s.queue)
	s.queue, s.pushes, s.pushBytes = nil, 0, 0
	if old := s.att; old != nil {
		// As a take-over by another stream: its writer stops.
		s.att = nil
		close(old.kicked)
	}
	return pushes, nil
}

// Rehome registers, with its fallback holder under the current view
// (home, an id as SessionHome.Register returns), each session this silo
// holds whose fallback holder changed since it registered, and tries again
// the adoptions not finished: the cluster calls it after a view change,
// and now and then. It returns when
// every registration has been tried, or ctx ends.
func (ss *Sessions) Rehome(ctx context.Context, home func(addr string) string) {
	if ss.home == nil {
		return
	}
	ss.mu.RLock()
	var moved, unadopted []*session
	for _, s := range ss.m {
		s.mu.Lock()
		switch {
		case !s.adopted:
			// Only while its client is attached here: a client that
			// re-attached elsewhere since is not robbed of its session
			// (resuming here again finishes the adoption).
			if s.att != nil {
				unadopted = append(unadopted, s)
			}
		case s.home != home(s.addr):
			moved = append(moved, s)
		}
		s.mu.Unlock()
	}
	ss.mu.RUnlock()
	for _, s := range unadopted {
		if ctx.Err() != nil {
			return
		}
		if err := ss.adoptFrom(ctx, s); err != nil {
			ss.log.Debug("client session adoption not finished yet", "session", s.addr, "err", err)
		}
	}
	for _, s := range moved {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		old := s.home
		s.mu.Unlock()
		ss.register(ctx, s)
		s.mu.Lock()
		now := s.home
		s.mu.Unlock()
		if old != "" && old != now {
			ss.home.Forget(old, s.addr)
		}
	}
}

// DeliverToSession implements siloapi.SessionRouter: it queues msg for the
// session at msg.To, to be written to its stream in order, now or when the
// client re-attaches. It never blocks. A session with SessionBacklog
// messages not yet written refuses more with ResourceExhausted; an address
// the gateway holds no session for is NotFound.
func (ss *Sessions) DeliverToSession(_ context.Context, msg *agentsilov1.AgentMessage) error {
	if msg == nil {
		return errs.New(codes.InvalidArgument, "nil message")
	}
	a, err := grain.ParseAddress(msg.To)
	if err != nil {
		return err
	}
	if a.Type != grain.SessionType {
		return errs.New(codes.InvalidArgument, "%s is not a client session address", protocol.Clip(msg.To))
	}
	if err := protocol.CheckMessage(msg); err != nil {
		return err // a push that cannot be encoded would end the session's stream
	}
	ss.mu.RLock()
	s := ss.m[msg.To]
	ss.mu.RUnlock()
	if s == nil {
		return errs.New(codes.NotFound, "no client session %s", protocol.Clip(msg.To))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att == nil && ss.expired(s, time.Now()) {
		return errs.New(codes.NotFound, "client session %s has expired", msg.To)
	}
	if s.pushes >= ss.backlog {
		return errs.New(codes.ResourceExhausted, "client session %s has %d messages it has not received yet", msg.To, s.pushes)
	}
	n := proto.Size(msg)
	if s.pushes > 0 && s.pushBytes+n > ss.backlogBytes {
		return errs.New(codes.ResourceExhausted, "client session %s has %d bytes of messages it has not received yet", msg.To, s.pushBytes)
	}
	s.enqueueLocked(outFrame{frame: &agentsilov1.ServerFrame{Frame: &agentsilov1.ServerFrame_Push{Push: msg}}, size: n})
	return nil
}

// expired reports whether s has been detached longer than SessionBacklogAge.
// s.mu is held.
func (ss *Sessions) expired(s *session, now time.Time) bool {
	return s.att == nil && s.opening == 0 && now.Sub(s.detachedAt) > ss.age
}

// sweep forgets the sessions detached longer than SessionBacklogAge, with
// their backlogs.
func (ss *Sessions) sweep(now time.Time) {
	var removed []*session
	ss.mu.Lock()
	for _, s := range ss.m {
		s.mu.Lock()
		if ss.expired(s, now) {
			removed = append(removed, ss.removeLocked(s))
		}
		s.mu.Unlock()
	}
	ss.mu.Unlock()
	ss.forget(removed...)
}

// sweepLoop runs sweep until stop is closed.
func (ss *Sessions) sweepLoop(stop <-chan struct{}) {
	every := min(max(ss.age/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ss.sweep(time.Now())
		}
	}
}
