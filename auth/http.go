package auth

import (
	"net/http"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// AuthenticateHTTP returns the caller of an HTTP request exactly as the
// gateway proves its gRPC clients: an API key in the x-api-key header (or
// as "Authorization: Bearer KEY"), a token of the OpenID provider
// ("Authorization: Bearer TOKEN"), a client certificate, or, without
// authentication configured, a principal declared in the
// x-agentsilo-principal header (default DefaultPrincipal). The errors are
// the gateway's: Unauthenticated for a wrong or missing key or
// certificate, PermissionDenied for a declared principal other than the
// proven one, InvalidArgument for a malformed one.
func (a *Authenticator) AuthenticateHTTP(r *http.Request) (*acl.Caller, error) {
	// authenticate reads gRPC metadata and the peer's TLS state: give it
	// the request's.
	md := metadata.MD{}
	if k := r.Header.Get(protocol.APIKeyHeader); k != "" {
		md.Set(protocol.APIKeyHeader, k)
	} else if v := r.Header.Get("Authorization"); v != "" {
		md.Set(authorizationHeader, v)
	}
	ctx := metadata.NewIncomingContext(r.Context(), md)
	if r.TLS != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: *r.TLS}})
	}
	proven, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return CallerFor(proven, r.Header.Get(protocol.PrincipalHeader))
}
