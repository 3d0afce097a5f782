package client

import (
	"context"

	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// WithTokenSource sends a bearer token from ts as the `authorization`
// metadata of every call and session, for a gateway that takes the tokens
// of an OpenID provider (the silo's --oidc-issuer). ts is asked for a
// token at each call, so a source that refreshes its tokens
// (oauth2.ReuseTokenSource, an oauth2.Config's or clientcredentials.Config's
// TokenSource) keeps the client signed in; a session opened with a token
// lasts until it ends, and is authenticated again with a fresh token when
// it reattaches. oauth2.StaticTokenSource sends one token. An error from
// ts fails the call with Unauthenticated, before anything is sent.
func WithTokenSource(ts oauth2.TokenSource) Option {
	return optionFunc(func(o *options) { o.tokens = ts })
}

// tokenCreds are gRPC per-call credentials from a token source.
type tokenCreds struct{ ts oauth2.TokenSource }

func (c tokenCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	t, err := c.ts.Token()
	if err != nil {
		return nil, errs.Wrap(codes.Unauthenticated, err, "client: the token source")
	}
	if t.AccessToken == "" {
		return nil, errs.New(codes.Unauthenticated, "client: the token source gave an empty token")
	}
	return map[string]string{"authorization": "Bearer " + t.AccessToken}, nil
}

// RequireTransportSecurity is false, as for API keys: a development
// gateway on loopback serves plaintext. Use WithTLS elsewhere.
func (tokenCreds) RequireTransportSecurity() bool { return false }
