package gateway

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// HTTPAuthenticator proves the callers of an HTTP server (the silo's A2A
// endpoint) exactly as the gateway proves its gRPC clients, from the same
// AuthConfig: an API key in the x-api-key header (or as
// "Authorization: Bearer KEY"), a client certificate, or, without
// authentication configured, a principal declared in the
// x-agentsilo-principal header (default DefaultPrincipal). It is
// immutable and safe for concurrent use.
type HTTPAuthenticator struct{ a *authenticator }

// NewHTTPAuthenticator reads cfg's key file and certificates.
func NewHTTPAuthenticator(cfg AuthConfig) (*HTTPAuthenticator, error) {
	a, err := newAuthenticator(cfg)
	if err != nil {
		return nil, err
	}
	return &HTTPAuthenticator{a: a}, nil
}

// Enabled reports whether callers are proven (API keys or client
// certificates) rather than self-declared.
func (h *HTTPAuthenticator) Enabled() bool { return h.a.enabled() }

// APIKeys and MutualTLS report which proofs are accepted.
func (h *HTTPAuthenticator) APIKeys() bool   { return len(h.a.keys) > 0 }
func (h *HTTPAuthenticator) MutualTLS() bool { return h.a.mtls }

// TLSConfig returns the server's TLS configuration (certificate, client
// CAs), or nil to serve plaintext.
func (h *HTTPAuthenticator) TLSConfig() *tls.Config {
	if h.a.tls == nil {
		return nil
	}
	return h.a.tls.Clone()
}

// Authenticate returns the caller of r: proven, or declared where nothing
// is configured. The errors are the gateway's: Unauthenticated for a wrong
// or missing key or certificate, PermissionDenied for a declared principal
// other than the proven one, InvalidArgument for a malformed one.
func (h *HTTPAuthenticator) Authenticate(r *http.Request) (*acl.Caller, error) {
	// The gateway's authenticator reads gRPC metadata and the peer's TLS
	// state: give it the request's.
	md := metadata.MD{}
	if k := r.Header.Get(protocol.APIKeyHeader); k != "" {
		md.Set(protocol.APIKeyHeader, k)
	} else if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
		md.Set(protocol.APIKeyHeader, strings.TrimSpace(v))
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	if r.TLS != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: *r.TLS}})
	}
	proven, err := h.a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return callerFor(proven, r.Header.Get(protocol.PrincipalHeader))
}
