package gateway

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
)

// A client must not be able to make the gateway hold memory without bound,
// nor starve the other principals. What one client can make it hold is
// bounded at every step:
//
//   - A Session stream must send its Hello within HelloTimeout; until then
//     it counts, for a principal its credentials prove, against
//     MaxSessionsPerPrincipal streams awaiting their Hello.
//   - A principal holds at most MaxSessionsPerPrincipal sessions (attached
//     or kept for re-attaching): a new one past it replaces the principal's
//     session that has been detached longest, or, with all of them
//     attached, is refused with ResourceExhausted.
//   - A principal has at most MaxCallsPerPrincipal calls in flight, on its
//     sessions and unary together; a call past it fails at once with
//     ResourceExhausted.
//   - A session stream has at most SessionPending calls in flight plus
//     results not yet written, of at most SessionPendingBytes (a first call
//     always fits). Past either, the gateway stops reading the stream's
//     frames: HTTP/2 flow control then holds the client's sends. If
//     results wait unwritten while the gateway's writes make no progress
//     for StallTimeout (the client does not read its stream), the stream
//     ends with ResourceExhausted; its session stays, for the client to
//     re-attach. The stream's trailers wait behind the results the client
//     has not read, and with them the stream's buffers: so StallTimeout
//     later the client's connection is closed (an SDK client always reads
//     its stream; a proxy that multiplexes clients on one connection
//     should bound its clients' streams itself).
//   - Pushes waiting for a session are bounded by SessionBacklog messages
//     and SessionBacklogBytes (a first push always fits).
//
// So a session stream holds at most about SessionPendingBytes plus two
// messages plus the stream's HTTP/2 receive window, and a principal
// MaxSessionsPerPrincipal times that (and its pushes), plus
// MaxCallsPerPrincipal unary calls.

// Limits bound what one client, and one principal, can make a gateway
// hold. Start from DefaultLimits.
type Limits struct {
	// HelloTimeout is how long a Session stream may take to send its
	// Hello (--hello-timeout); then it ends with DeadlineExceeded.
	// Default: 10 s.
	HelloTimeout time.Duration
	// MaxSessionsPerPrincipal bounds the sessions of one principal
	// (--max-sessions-per-principal), and, separately, its streams awaiting
	// their Hello. Default: 100.
	MaxSessionsPerPrincipal int
	// MaxCallsPerPrincipal bounds one principal's calls in flight, unary
	// and on sessions (--max-calls-per-principal). Default: 1000.
	MaxCallsPerPrincipal int
	// SessionPending bounds a session stream's calls in flight plus the
	// results it has not written yet. Default: 256.
	SessionPending int
	// SessionPendingBytes bounds the encoded bytes of those calls' messages
	// and results. Default: 8 MiB.
	SessionPendingBytes int
	// SessionBacklogBytes bounds the encoded bytes of the pushes waiting
	// for a session (SessionBacklog bounds their number). Default: 8 MiB.
	SessionBacklogBytes int
	// StallTimeout is how long a session stream over its pending bounds
	// may go without the client reading a frame before the stream ends
	// with ResourceExhausted. Default: 30 s.
	StallTimeout time.Duration
}

// DefaultLimits returns the defaults described on Limits' fields.
func DefaultLimits() Limits {
	return Limits{
		HelloTimeout:            10 * time.Second,
		MaxSessionsPerPrincipal: 100,
		MaxCallsPerPrincipal:    1000,
		SessionPending:          256,
		SessionPendingBytes:     8 << 20,
		SessionBacklogBytes:     8 << 20,
		StallTimeout:            30 * time.Second,
	}
}

func (l *Limits) validate() error {
	switch {
	case l.HelloTimeout <= 0:
		return fmt.Errorf("gateway: HelloTimeout %v must be positive", l.HelloTimeout)
	case l.MaxSessionsPerPrincipal < 1:
		return fmt.Errorf("gateway: MaxSessionsPerPrincipal %d must be at least 1", l.MaxSessionsPerPrincipal)
	case l.MaxCallsPerPrincipal < 1:
		return fmt.Errorf("gateway: MaxCallsPerPrincipal %d must be at least 1", l.MaxCallsPerPrincipal)
	case l.SessionPending < 1:
		return fmt.Errorf("gateway: SessionPending %d must be at least 1", l.SessionPending)
	case l.SessionPendingBytes < 1:
		return fmt.Errorf("gateway: SessionPendingBytes %d must be at least 1", l.SessionPendingBytes)
	case l.SessionBacklogBytes < 1:
		return fmt.Errorf("gateway: SessionBacklogBytes %d must be at least 1", l.SessionBacklogBytes)
	case l.StallTimeout <= 0:
		return fmt.Errorf("gateway: StallTimeout %v must be positive", l.StallTimeout)
	}
	return nil
}

// principals counts, per principal, the calls in flight and the session
// streams awaiting their Hello. Its methods are safe for concurrent use.
type principals struct {
	maxCalls, maxHellos int

	mu sync.Mutex
	m  map[string]*usage
}

type usage struct{ calls, hellos int }

func newPrincipals(l Limits) *principals {
	return &principals{maxCalls: l.MaxCallsPerPrincipal, maxHellos: l.MaxSessionsPerPrincipal, m: make(map[string]*usage)}
}

// take counts one more of what field selects for p, unless p is at max;
// the returned func gives it back.
func (ps *principals) take(p string, field func(*usage) *int, max int, what string) (func(), error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	u := ps.m[p]
	if u == nil {
		u = &usage{}
		ps.m[p] = u
	}
	n := field(u)
	if *n >= max {
		return nil, errs.New(codes.ResourceExhausted, "principal %s has %d %s (the gateway's limit): refused before it ran", p, *n, what)
	}
	*n++
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			*n--
			if u.calls == 0 && u.hellos == 0 {
				delete(ps.m, p)
			}
		})
	}, nil
}

// call counts a call of p in flight.
func (ps *principals) call(p string) (func(), error) {
	return ps.take(p, func(u *usage) *int { return &u.calls }, ps.maxCalls, "calls in flight")
}

// hello counts a session stream of p that has not sent its Hello yet.
func (ps *principals) hello(p string) (func(), error) {
	return ps.take(p, func(u *usage) *int { return &u.hellos }, ps.maxHellos, "session streams awaiting their Hello")
}

// unaryLimit counts every unary call of the gateway's services against its
// principal's calls in flight. A call whose principal is not known (its
// metadata is bad) is left to the handler to refuse.
func (g *Gateway) unaryLimit(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if auth.PublicMethod(info.FullMethod) || !strings.HasPrefix(info.FullMethod, "/agentsilo.") {
		return h(ctx, req)
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return h(ctx, req)
	}
	done, err := g.principals.call(c.Principal)
	if err != nil {
		return nil, err
	}
	defer done()
	return h(ctx, req)
}

// conns tracks the gateway's client connections by their remote address,
// so that the connection of a client that reads nothing can be closed: a
// stream ended with data the client has not read keeps its trailers, and
// its buffers, behind that data, for as long as the connection lives.
type conns struct {
	mu sync.Mutex
	m  map[string]net.Conn
}

func (cs *conns) listener(l net.Listener) net.Listener { return &trackedListener{Listener: l, cs: cs} }

// close closes the connection whose remote address is addr, if it is open.
func (cs *conns) close(addr string) {
	cs.mu.Lock()
	c := cs.m[addr]
	cs.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

type trackedListener struct {
	net.Listener
	cs *conns
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, cs: l.cs, key: c.RemoteAddr().String()}
	l.cs.mu.Lock()
	if l.cs.m == nil {
		l.cs.m = make(map[string]net.Conn)
	}
	l.cs.m[tc.key] = tc
	l.cs.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	cs   *conns
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.cs.mu.Lock()
		if c.cs.m[c.key] == c {
			delete(c.cs.m, c.key)
		}
		c.cs.mu.Unlock()
	})
	return c.Conn.Close()
}

// cutOff closes, after StallTimeout more, the connection of a session stream
// ended for not reading its results: time for a client that reads again to
// get the stream's ResourceExhausted. It returns early when the gateway
// stops.
func (g *Gateway) cutOff(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	t := time.NewTimer(g.cfg.Limits.StallTimeout)
	defer t.Stop()
	select {
	case <-t.C:
		g.conns.close(p.Addr.String())
	case <-g.stop:
	}
}
