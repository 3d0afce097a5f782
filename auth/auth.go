package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// Authenticator proves the callers of a server from a Config: the gRPC
// gateway through ServerOptions, an HTTP server through AuthenticateHTTP.
// It is immutable and safe for concurrent use.
type Authenticator struct {
	keys   map[[sha256.Size]byte]*acl.Caller
	mtls   bool
	tls    *tls.Config // nil: plaintext
	tokens *tokens     // nil: no OpenID tokens
}

// New reads cfg's key file and certificates. A malformed file, key or
// certificate is InvalidArgument.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{keys: make(map[[sha256.Size]byte]*acl.Caller)}
	keys, err := cfg.allKeys()
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		h, err := hex.DecodeString(strings.TrimSpace(k.SHA256))
		if err != nil || len(h) != sha256.Size {
			return nil, errs.New(codes.InvalidArgument, "auth: API key %d (%s): sha256 must be 64 hex digits", i+1, k.Principal)
		}
		if !names.Valid(k.Principal) {
			return nil, errs.New(codes.InvalidArgument, "auth: API key %d: principal %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", i+1, k.Principal)
		}
		for _, g := range k.Groups {
			if !names.Valid(g) {
				return nil, errs.New(codes.InvalidArgument, "auth: API key %d (%s): group %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", i+1, k.Principal, g)
			}
		}
		a.keys[[sha256.Size]byte(h)] = &acl.Caller{Principal: k.Principal, Groups: k.Groups}
	}
	if err := a.loadTLS(cfg); err != nil {
		return nil, err
	}
	if cfg.OIDC.Enabled() {
		if a.tokens, err = newTokens(cfg.OIDC); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// allKeys returns cfg.Keys and those of cfg.KeyFile.
func (c *Config) allKeys() ([]APIKey, error) {
	if c.KeyFile == "" {
		return c.Keys, nil
	}
	b, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: API-key file: %w", err)
	}
	var f struct {
		Keys []APIKey `json:"keys"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: API-key file %s: %w", c.KeyFile, err)
	}
	if len(f.Keys) == 0 {
		return nil, errs.New(codes.InvalidArgument, "auth: API-key file %s has no keys", c.KeyFile)
	}
	return append(append([]APIKey(nil), c.Keys...), f.Keys...), nil
}

// loadTLS reads the server's certificate and the client CA.
func (a *Authenticator) loadTLS(cfg Config) error {
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return errs.New(codes.InvalidArgument, "auth: TLS certificate and key go together (--tls-cert, --tls-key)")
	}
	if cfg.TLSClientCA != "" && cfg.TLSCert == "" {
		return errs.New(codes.InvalidArgument, "auth: client certificates (--tls-client-ca) need the server to serve TLS (--tls-cert, --tls-key)")
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return errs.New(codes.InvalidArgument, "auth: TLS certificate: %w", err)
		}
		a.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return errs.New(codes.InvalidArgument, "auth: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errs.New(codes.InvalidArgument, "auth: client CA %s: no PEM certificates", cfg.TLSClientCA)
		}
		a.tls.ClientCAs = pool
		a.tls.ClientAuth = tls.RequireAndVerifyClientCert
		if len(a.keys) > 0 || cfg.OIDC.Enabled() {
			a.tls.ClientAuth = tls.VerifyClientCertIfGiven
		}
		a.mtls = true
	}
	return nil
}

// Enabled reports whether callers are proven (API keys, client
// certificates or OpenID tokens) rather than self-declared.
func (a *Authenticator) Enabled() bool { return len(a.keys) > 0 || a.mtls || a.tokens != nil }

// OIDC reports whether bearer tokens from an OpenID provider are accepted,
// and from which issuer.
func (a *Authenticator) OIDC() (issuer string, ok bool) {
	if a.tokens == nil {
		return "", false
	}
	return a.tokens.cfg.Issuer, true
}

// APIKeys reports whether API keys are accepted.
func (a *Authenticator) APIKeys() bool { return len(a.keys) > 0 }

// MutualTLS reports whether client certificates are accepted.
func (a *Authenticator) MutualTLS() bool { return a.mtls }

// OAuth2 returns an OAuth 2.0 client configuration at the OpenID provider
// for clientID (a public client: it signs users in with the authorization
// code grant and PKCE) and redirectURL, with the provider's endpoints
// found by discovery, and ctx carrying the HTTP client to reach the
// provider with (for the configuration's Exchange). Without a provider it
// is FailedPrecondition; a provider that cannot be reached is
// Unavailable.
func (a *Authenticator) OAuth2(ctx context.Context, clientID, redirectURL string) (*oauth2.Config, context.Context, error) {
	if a.tokens == nil {
		return nil, ctx, errs.New(codes.FailedPrecondition, "auth: no OpenID provider (--oidc-issuer)")
	}
	ep, err := a.tokens.endpoint(ctx)
	if err != nil {
		return nil, ctx, err
	}
	ep.AuthStyle = oauth2.AuthStyleInParams // a public client: its id in the form
	cfg := &oauth2.Config{ClientID: clientID, Endpoint: ep, RedirectURL: redirectURL, Scopes: []string{oidc.ScopeOpenID}}
	return cfg, context.WithValue(ctx, oauth2.HTTPClient, a.tokens.cfg.HTTPClient), nil
}

// Mode names how callers are authenticated, for a server's log.
func (a *Authenticator) Mode() string {
	var m []string
	if len(a.keys) > 0 {
		m = append(m, "API keys")
	}
	if a.mtls {
		m = append(m, "client certificates")
	}
	if a.tokens != nil {
		m = append(m, "OpenID tokens of "+a.tokens.cfg.Issuer)
	}
	if len(m) == 0 {
		return "self-declared principals"
	}
	return strings.Join(m, " or ")
}

// TLSConfig returns the server's TLS configuration (certificate, client
// CAs), or nil to serve plaintext.
func (a *Authenticator) TLSConfig() *tls.Config {
	if a.tls == nil {
		return nil
	}
	return a.tls.Clone()
}

// authenticate returns the caller of ctx's call: proven by an API key or a
// client certificate, or, without authentication configured, nil (the
// principal is self-declared). A key that is wrong, or no credentials where
// they are required, is Unauthenticated.
//
// A call of the silo's own code over an InProcess connection may instead
// carry the caller it vouches for (Vouch); on any other connection that is
// Unauthenticated.
func (a *Authenticator) authenticate(ctx context.Context) (*acl.Caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if c, err := vouched(ctx, md); c != nil || err != nil {
		return c, err
	}
	if !a.Enabled() {
		return nil, nil
	}
	if v := md.Get(protocol.APIKeyHeader); len(v) > 0 && len(a.keys) > 0 {
		return a.apiKey(v[0])
	}
	if v := md.Get(authorizationHeader); len(v) > 0 {
		bearer, ok := cutBearer(v[0])
		switch {
		case !ok:
			return nil, errs.New(codes.Unauthenticated, "the authorization metadata is not \"Bearer TOKEN\"")
		case a.tokens != nil && looksLikeJWT(bearer):
			return a.tokens.verify(ctx, bearer)
		case len(a.keys) > 0:
			return a.apiKey(bearer)
		case a.tokens != nil:
			return nil, errs.New(codes.Unauthenticated, "bearer token refused: not a JSON Web Token")
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if c, err := a.CertificateCaller(&info.State); c != nil || err != nil {
				return c, err
			}
		}
	}
	switch {
	case a.tokens != nil:
	case len(a.keys) > 0 && a.mtls:
		return nil, errs.New(codes.Unauthenticated, "no credentials: send an API key as %s metadata or present a client certificate", protocol.APIKeyHeader)
	case len(a.keys) > 0:
		return nil, errs.New(codes.Unauthenticated, "no API key: send it as %s metadata", protocol.APIKeyHeader)
	default:
		return nil, errs.New(codes.Unauthenticated, "no client certificate")
	}
	var ways []string
	if len(a.keys) > 0 {
		ways = append(ways, "send an API key as "+protocol.APIKeyHeader+" metadata")
	}
	if a.tokens != nil {
		ways = append(ways, "send a token of "+a.tokens.cfg.Issuer+" as \"authorization: Bearer TOKEN\"")
	}
	if a.mtls {
		ways = append(ways, "present a client certificate")
	}
	return nil, errs.New(codes.Unauthenticated, "no credentials: %s", strings.Join(ways, ", or "))
}

// authorizationHeader is the metadata (and HTTP header) of bearer
// credentials.
const authorizationHeader = "authorization"

// cutBearer returns the credentials of an authorization value "Bearer X"
// (the scheme in any case).
func cutBearer(v string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// apiKey returns the caller key proves, or Unauthenticated.
func (a *Authenticator) apiKey(key string) (*acl.Caller, error) {
	if c := a.keys[sha256.Sum256([]byte(key))]; c != nil {
		return c, nil
	}
	return nil, errs.New(codes.Unauthenticated, "unknown API key")
}

// CertificateCaller returns the caller the client certificate of a TLS
// connection proves, exactly as the gateway takes it (see certCaller), or
// nil, nil if the connection showed no certificate verified against the
// client CA (or client certificates are not configured). A verified
// certificate naming no usable principal is Unauthenticated.
func (a *Authenticator) CertificateCaller(state *tls.ConnectionState) (*acl.Caller, error) {
	if !a.mtls || state == nil || len(state.VerifiedChains) == 0 || len(state.PeerCertificates) == 0 {
		return nil, nil
	}
	return certCaller(state.PeerCertificates[0])
}

// certCaller is the caller a verified client certificate names: its subject
// common name or, without one, its first DNS name; its organizational units
// are its groups.
func certCaller(cert *x509.Certificate) (*acl.Caller, error) {
	p := cert.Subject.CommonName
	if p == "" && len(cert.DNSNames) > 0 {
		p = cert.DNSNames[0]
	}
	if !names.Valid(p) {
		return nil, errs.New(codes.Unauthenticated, "the client certificate names no usable principal (common name or first DNS name %q): want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(p))
	}
	var groups []string
	for _, ou := range cert.Subject.OrganizationalUnit {
		if names.Valid(ou) {
			groups = append(groups, ou)
		}
	}
	return &acl.Caller{Principal: p, Groups: groups}, nil
}

// CallerFor returns the caller of a call: the proven one (from
// authentication), which a declared principal (if any) must agree with,
// or, where nothing is proven (development mode), the declared principal
// (default DefaultPrincipal). A declared principal other than the proven
// one is PermissionDenied; a malformed one is InvalidArgument.
func CallerFor(proven *acl.Caller, declared string) (*acl.Caller, error) {
	if proven == nil {
		p, err := principal(declared)
		if err != nil {
			return nil, err
		}
		return &acl.Caller{Principal: p}, nil
	}
	if declared != "" && declared != proven.Principal {
		return nil, errs.New(codes.PermissionDenied, "authenticated as %s, the client cannot act as %q", proven.Principal, protocol.Clip(declared))
	}
	return proven, nil
}

// principal checks a self-declared principal; empty means DefaultPrincipal.
func principal(p string) (string, error) {
	if p == "" {
		return DefaultPrincipal, nil
	}
	if !names.Valid(p) {
		return "", errs.New(codes.InvalidArgument, "principal %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(p))
	}
	return p, nil
}
