package auth

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// ServerOptions are the gRPC server options that authenticate every call:
// TLS credentials (if configured; a connection of an InProcess listener
// skips the handshake and may vouch for its caller) and interceptors that put the caller in
// the call's context (acl.CallerFrom). A unary call's caller is proven, or
// declared in its `x-agentsilo-principal` metadata; a stream carries a
// proven caller only (a gateway Session declares its principal in its
// Hello: see CallerFor). The health service and server reflection are
// served without authentication.
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	creds := serverCreds{}
	if a.tls != nil {
		creds.inner = credentials.NewTLS(a.tls)
	}
	return []grpc.ServerOption{grpc.Creds(creds), grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

// PublicMethod reports whether a gRPC method (its full name) is served
// without authentication: the health service (for probes) and server
// reflection (the schema only).
func PublicMethod(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.") || strings.HasPrefix(method, "/grpc.reflection.")
}

// DeclaredPrincipal is the principal metadata of a gRPC call, if any.
func DeclaredPrincipal(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(protocol.PrincipalHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (a *Authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if PublicMethod(info.FullMethod) {
		return h(ctx, req)
	}
	proven, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	c, err := CallerFor(proven, DeclaredPrincipal(ctx))
	if err != nil {
		return nil, err
	}
	return h(acl.WithCaller(ctx, c), req)
}

// stream authenticates a stream. A Session declares its principal in its
// Hello, so in development mode the stream carries no caller yet.
func (a *Authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if PublicMethod(info.FullMethod) {
		return h(srv, ss)
	}
	proven, err := a.authenticate(ss.Context())
	if err != nil {
		return err
	}
	if proven == nil {
		return h(srv, ss)
	}
	return h(srv, &callerStream{ServerStream: ss, ctx: acl.WithCaller(ss.Context(), proven)})
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }
