package auth

import (
	"context"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// The silo's own code (its dashboard) calls its gateway as the principal a
// user proved to it, for instance by a client certificate whose private
// key stays in the user's browser: the dashboard cannot show the gateway
// that proof, so it vouches for the principal (Vouch). A vouch is taken
// only from a connection of an InProcess listener, which never leaves the
// process: a server's ServerOptions recognise such a connection in their
// handshake, by its address, which no network connection can have. On any
// other connection the vouching metadata is refused (Unauthenticated), so
// nobody outside the process can act as a principal by naming it.

// Metadata of a vouched call: the principal, and its groups (one value
// each).
const (
	vouchedPrincipalHeader = "x-agentsilo-vouched-principal"
	vouchedGroupsHeader    = "x-agentsilo-vouched-groups"
)

// Vouch returns ctx whose outgoing gRPC calls act as caller, proven by the
// silo's own code. The server takes it only on a connection dialled through
// an InProcess listener it serves.
func Vouch(ctx context.Context, caller *acl.Caller) context.Context {
	kv := []string{vouchedPrincipalHeader, caller.Principal}
	for _, g := range caller.Groups {
		kv = append(kv, vouchedGroupsHeader, g)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// InProcess is a listener whose connections are dialled from within the
// process (DialContext): a gRPC server with ServerOptions serving it takes
// vouched principals (Vouch) on them. Each connection is a pair of
// in-memory pipes (net.Pipe); no socket is opened, so nothing outside the
// process can dial it. Safe for concurrent use.
type InProcess struct {
	conns  chan net.Conn // the server's ends, from DialContext to Accept
	done   chan struct{} // closed by Close
	closed sync.Once
}

// NewInProcess returns a listener; Close ends it and its pending dials.
func NewInProcess() *InProcess {
	return &InProcess{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next connection dialled to the listener; after
// Close it returns net.ErrClosed.
func (p *InProcess) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

// Close stops the listener; connections already made stay open.
func (p *InProcess) Close() error {
	p.closed.Do(func() { close(p.done) })
	return nil
}

// Addr is the listener's address, which no network listener has.
func (p *InProcess) Addr() net.Addr { return inProcessAddr{} }

// DialContext connects to the listener (a grpc.WithContextDialer), once
// Accept takes the connection; the address is ignored. It fails with
// net.ErrClosed once the listener is closed, and with ctx's error if ctx
// ends first.
func (p *InProcess) DialContext(ctx context.Context, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case p.conns <- inProcessConn{server}:
		return inProcessConn{client}, nil
	case <-p.done:
		server.Close()
		client.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		server.Close()
		client.Close()
		return nil, ctx.Err()
	}
}

// inProcessConn is one end of an InProcess connection.
type inProcessConn struct{ net.Conn }

func (inProcessConn) LocalAddr() net.Addr  { return inProcessAddr{} }
func (inProcessConn) RemoteAddr() net.Addr { return inProcessAddr{} }

// inProcessAddr is the address of both ends of an InProcess connection:
// unexported, so nothing but this package makes one.
type inProcessAddr struct{}

func (inProcessAddr) Network() string { return "agentsilo-in-process" }
func (inProcessAddr) String() string  { return "in-process" }

// inProcessInfo is the AuthInfo of an InProcess connection.
type inProcessInfo struct{ credentials.CommonAuthInfo }

func (inProcessInfo) AuthType() string { return "in-process" }

// serverCreds are a server's transport credentials (TLS, or plaintext when
// inner is nil) that know InProcess connections: those skip the
// handshake, as they never leave the process, and carry inProcessInfo.
type serverCreds struct {
	inner credentials.TransportCredentials // nil: plaintext
}

func (c serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.RemoteAddr().(inProcessAddr); ok {
		return conn, inProcessInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	if c.inner == nil {
		return conn, nil, nil
	}
	return c.inner.ServerHandshake(conn)
}

func (c serverCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.inner == nil {
		return conn, nil, nil
	}
	return c.inner.ClientHandshake(ctx, authority, conn)
}

func (c serverCreds) Info() credentials.ProtocolInfo {
	if c.inner == nil {
		return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
	}
	return c.inner.Info()
}

func (c serverCreds) Clone() credentials.TransportCredentials {
	if c.inner == nil {
		return serverCreds{}
	}
	return serverCreds{inner: c.inner.Clone()}
}

// OverrideServerName is part of the interface; a server names none.
func (c serverCreds) OverrideServerName(string) error { return nil }

// inProcess reports whether ctx's call came over an InProcess connection.
func inProcess(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, ok = p.AuthInfo.(inProcessInfo)
	return ok
}

// vouched returns the caller a call's metadata vouches for, or nil if it
// vouches for none. Vouching metadata on a call that did not come over an
// InProcess connection is Unauthenticated: only the silo's own code
// vouches.
func vouched(ctx context.Context, md metadata.MD) (*acl.Caller, error) {
	v := md.Get(vouchedPrincipalHeader)
	groups := md.Get(vouchedGroupsHeader)
	if len(v) == 0 && len(groups) == 0 {
		return nil, nil
	}
	if !inProcess(ctx) {
		return nil, errs.New(codes.Unauthenticated, "%s is taken only from the silo's own dashboard, never from a client", vouchedPrincipalHeader)
	}
	if len(v) != 1 || !names.Valid(v[0]) {
		return nil, errs.New(codes.InvalidArgument, "vouched principal %q: want one, [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(strings.Join(v, ",")))
	}
	for _, g := range groups {
		if !names.Valid(g) {
			return nil, errs.New(codes.InvalidArgument, "vouched group %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(g))
		}
	}
	return &acl.Caller{Principal: v[0], Groups: groups}, nil
}
