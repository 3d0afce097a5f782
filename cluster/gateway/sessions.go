package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Sessions holds a gateway's client sessions and their backlogs. It is the
// runtime's grain.SessionRouter (directly on a single silo, or behind the
// cluster's router, which forwards to the silo holding a session), so it is
// made before the runtime, and the gateway that serves the sessions' streams
// after it. Its methods are safe for concurrent use.
type Sessions struct {
	backlog      int
	backlogBytes int
	age          time.Duration
	perPrincipal int    // Limits.MaxSessionsPerPrincipal
	silo         string // named in session ids, so other silos route here; "" on a lone silo

	// mu guards m and count; it is taken before a session's mu, never
	// after.
	mu    sync.RWMutex
	m     map[string]*session
	count map[string]int // sessions in m per principal

	// forgotten, if set (by New), is told of each session forgotten, with
	// ss.mu held: it must not block.
	forgotten func(addr string)
}

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

// removeLocked forgets s. ss.mu is held.
func (ss *Sessions) removeLocked(s *session) {
	if ss.m[s.addr] != s {
		return
	}
	delete(ss.m, s.addr)
	if ss.forgotten != nil {
		ss.forgotten(s.addr)
	}
	if ss.count[s.principal]--; ss.count[s.principal] <= 0 {
		delete(ss.count, s.principal)
	}
}

// makeRoomLocked makes room for one more session of principal p: at the
// limit, the session of p detached longest is forgotten, with its backlog;
// with every one attached, it is ResourceExhausted. ss.mu is held.
func (ss *Sessions) makeRoomLocked(p string) error {
	if ss.count[p] < ss.perPrincipal {
		return nil
	}
	var oldest *session
	var since time.Time
	for _, s := range ss.m {
		if s.principal != p {
			continue
		}
		s.mu.Lock()
		if s.att == nil && (oldest == nil || s.detachedAt.Before(since)) {
			oldest, since = s, s.detachedAt
		}
		s.mu.Unlock()
	}
	if oldest == nil {
		return errs.New(codes.ResourceExhausted, "principal %s holds %d attached sessions (the gateway's limit)", p, ss.count[p])
	}
	ss.removeLocked(oldest)
	return nil
}

// open finds the session hello resumes, or opens a new one.
func (ss *Sessions) open(c *acl.Caller, hello *agentsilov1.Hello) (*session, bool, error) {
	p := c.Principal
	if addr := hello.GetResumeAddress(); addr != "" {
		ss.mu.Lock()
		s := ss.m[addr]
		if s != nil {
			s.mu.Lock()
			expired := ss.expired(s, time.Now())
			s.mu.Unlock()
			if expired {
				ss.removeLocked(s)
				s = nil
			}
		}
		ss.mu.Unlock()
		if s != nil {
			if subtle.ConstantTimeCompare([]byte(s.token), []byte(hello.GetResumeToken())) != 1 {
				return nil, false, errs.New(codes.PermissionDenied, "resume %s: wrong resume token", protocol.Clip(addr))
			}
			if s.principal != p {
				return nil, false, errs.New(codes.PermissionDenied, "resume %s: the session belongs to another principal", protocol.Clip(addr))
			}
			return s, true, nil
		}
		// Unknown or expired: a new session, and Welcome says resumed=false.
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, false, errs.New(codes.Internal, "resume token: %v", err)
	}
	id := grain.NewID()
	if ss.silo != "" && len(id)+1+len(ss.silo) <= 128 {
		id += "@" + ss.silo // other silos route the session's messages here
	}
	s := &session{
		addr:       grain.SessionType + ":" + p + ":" + id,
		principal:  p,
		caller:     c,
		token:      hex.EncodeToString(tok[:]),
		detachedAt: time.Now(),
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := ss.makeRoomLocked(p); err != nil {
		return nil, false, err
	}
	ss.m[s.addr] = s
	ss.count[p]++
	return s, false, nil
}

// DeliverToSession implements grain.SessionRouter: it queues msg for the
// session at msg.To, to be written to its stream in order, now or when the
// client re-attaches. It never blocks. A session with SessionBacklog
// messages not yet written refuses more with ResourceExhausted; an address
// the gateway holds no session for is NotFound.
func (ss *Sessions) DeliverToSession(_ context.Context, msg *grain.Message) error {
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
	return s.att == nil && now.Sub(s.detachedAt) > ss.age
}

// sweep forgets the sessions detached longer than SessionBacklogAge, with
// their backlogs.
func (ss *Sessions) sweep(now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.m {
		s.mu.Lock()
		if ss.expired(s, now) {
			ss.removeLocked(s)
		}
		s.mu.Unlock()
	}
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
