package a2a

import (
	"context"
	"errors"
	"net/http"
	"strings"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/grain"
)

// The spec's third binding, gRPC (service a2a.v1.A2AService, the SDK's
// a2agrpc handler), is served on the same port as the HTTP bindings:
// HTTP/2 requests of content type application/grpc go to it (cleartext
// HTTP/2 without TLS, HTTP/2 over TLS with it). A gRPC method's path names
// no agent, so the agent is the request's tenant: the agent's address
// Type:owner:alias, which its card's gRPC interface declares (an SDK client
// sends it with every request). Callers authenticate as on the other
// bindings (x-api-key or authorization metadata, a client certificate).

// newGRPC returns the gRPC server of the binding, its handler the SDK's.
// Its interceptors note each request's tenant in the call: the SDK's
// handler passes it on for most methods, not for CancelTask and
// SubscribeToTask.
func (s *Server) newGRPC() *grpc.Server {
	g := grpc.NewServer(grpc.MaxRecvMsgSize(s.maxBody),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			noteTenant(ctx, req)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, tenantStream{ss})
		}))
	a2agrpc.NewHandler(s.handler).RegisterWith(g)
	return g
}

// noteTenant records the tenant of req, a gRPC request, in its call.
func noteTenant(ctx context.Context, req any) {
	if t, ok := req.(interface{ GetTenant() string }); ok {
		if c := callFrom(ctx); c != nil && c.tenant == "" {
			c.tenant = t.GetTenant()
		}
	}
}

// tenantStream notes the tenant of a streaming call's request.
type tenantStream struct{ grpc.ServerStream }

func (s tenantStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		noteTenant(s.Context(), m)
	}
	return err
}

// isGRPC reports whether r is a gRPC call.
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// serveGRPC serves a gRPC call: its caller as the HTTP layer authenticates
// it; its agent, from the tenant, is set by the guard (tenantAgent).
func (s *Server) serveGRPC(w http.ResponseWriter, r *http.Request) {
	c := &call{grpc: true, base: s.baseOf(r), traceparent: r.Header.Get("traceparent")}
	if len(c.traceparent) != 55 {
		c.traceparent = ""
	}
	if c.caller, c.err = s.auth.AuthenticateHTTP(r); c.err == nil && c.caller.Principal == "" {
		c.err = errors.New("no principal")
	}
	s.grpc.ServeHTTP(w, r.WithContext(withCall(r.Context(), c)))
}

// tenantAgent sets c's agent from the tenant of a gRPC call (the SDK's, or
// the one its request carried): the agent's canonical address, of a
// registered type.
func (s *Server) tenantAgent(c *call, tenant string) error {
	if tenant == "" {
		tenant = c.tenant
	}
	if tenant == "" {
		return invalidParams("a gRPC call names its agent in the tenant field: Type:owner:alias (the agent card's gRPC interface gives it)")
	}
	a, err := grain.ParseAddress(tenant)
	if err != nil {
		return invalidParams("tenant %q: %w", clipID(tenant), err)
	}
	if _, ok := s.reg.Info(a.Type); !ok {
		return spec.NewError(spec.ErrInvalidParams, "tenant "+clipID(tenant)+": agent type "+a.Type+" is not registered")
	}
	c.agent = a
	return nil
}

// grpcTarget is the gRPC target of base, an http(s) URL: its host and port
// (the scheme's default port if none).
func grpcTarget(base string) string {
	host, tls := strings.CutPrefix(base, "https://")
	if !tls {
		host = strings.TrimPrefix(base, "http://")
	}
	host, _, _ = strings.Cut(host, "/")
	if strings.LastIndexByte(host, ':') <= strings.LastIndexByte(host, ']') {
		if tls {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	return host
}

// grpcProtocols are the protocols of srv: HTTP/1 and HTTP/2, cleartext
// HTTP/2 too without TLS. With TLS, srv's config offers h2 by ALPN.
func grpcProtocols(srv *http.Server) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	if srv.TLSConfig == nil {
		p.SetUnencryptedHTTP2(true)
	} else if len(srv.TLSConfig.NextProtos) == 0 {
		srv.TLSConfig = srv.TLSConfig.Clone()
		srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	}
	return p
}
