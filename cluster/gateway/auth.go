package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// AuthConfig says how the gateway proves who its clients are. With neither
// API keys nor client certificates it takes the principal a client declares,
// which the gateway allows only on a loopback address (or with Insecure).
type AuthConfig struct {
	// KeyFile is the API-key file (--auth-file): JSON
	// {"keys": [{"sha256": "<hex of the key>", "principal": "alice",
	// "groups": ["admins"]}]}. Clients send the key as `x-api-key`
	// metadata.
	KeyFile string
	// Keys are API keys given directly, beside those of KeyFile.
	Keys []APIKey
	// TLSCert and TLSKey are the gateway's certificate and key files
	// (--tls-cert, --tls-key): the gateway serves TLS.
	TLSCert, TLSKey string
	// TLSClientCA is a file of CA certificates (--tls-client-ca): clients
	// that present a certificate it signed are authenticated by it, as the
	// certificate's subject common name or, without one, its first DNS
	// name; its organizational units are the principal's groups. Without
	// API keys a client certificate is required.
	TLSClientCA string
}

// APIKey is one entry of the API-key file.
type APIKey struct {
	// SHA256 is the hex SHA-256 of the key; the key itself is not stored.
	SHA256    string   `json:"sha256"`
	Principal string   `json:"principal"`
	Groups    []string `json:"groups,omitempty"`
}

// Enabled reports whether c configures authentication (API keys or client
// certificates).
func (c *AuthConfig) Enabled() bool {
	return c.KeyFile != "" || len(c.Keys) > 0 || c.TLSClientCA != ""
}

// authenticator proves the callers of a gateway. It is immutable.
type authenticator struct {
	keys map[[sha256.Size]byte]*acl.Caller
	mtls bool
	tls  *tls.Config // nil: plaintext
}

func newAuthenticator(cfg AuthConfig) (*authenticator, error) {
	a := &authenticator{keys: make(map[[sha256.Size]byte]*acl.Caller)}
	keys := cfg.Keys
	if cfg.KeyFile != "" {
		b, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: API-key file: %w", err)
		}
		var f struct {
			Keys []APIKey `json:"keys"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("gateway: API-key file %s: %w", cfg.KeyFile, err)
		}
		if len(f.Keys) == 0 {
			return nil, fmt.Errorf("gateway: API-key file %s has no keys", cfg.KeyFile)
		}
		keys = append(append([]APIKey(nil), keys...), f.Keys...)
	}
	for i, k := range keys {
		h, err := hex.DecodeString(strings.TrimSpace(k.SHA256))
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("gateway: API key %d (%s): sha256 must be 64 hex digits", i+1, k.Principal)
		}
		if !grain.ValidName(k.Principal) {
			return nil, fmt.Errorf("gateway: API key %d: principal %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", i+1, k.Principal)
		}
		for _, g := range k.Groups {
			if !grain.ValidName(g) {
				return nil, fmt.Errorf("gateway: API key %d (%s): group %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", i+1, k.Principal, g)
			}
		}
		a.keys[[sha256.Size]byte(h)] = &acl.Caller{Principal: k.Principal, Groups: k.Groups}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, fmt.Errorf("gateway: TLS certificate and key go together (--tls-cert, --tls-key)")
	}
	if cfg.TLSClientCA != "" && cfg.TLSCert == "" {
		return nil, fmt.Errorf("gateway: client certificates (--tls-client-ca) need the gateway to serve TLS (--tls-cert, --tls-key)")
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("gateway: TLS certificate: %w", err)
		}
		a.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("gateway: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gateway: client CA %s: no PEM certificates", cfg.TLSClientCA)
		}
		a.tls.ClientCAs = pool
		a.tls.ClientAuth = tls.RequireAndVerifyClientCert
		if len(a.keys) > 0 {
			a.tls.ClientAuth = tls.VerifyClientCertIfGiven
		}
		a.mtls = true
	}
	return a, nil
}

// enabled reports whether callers are proven, not self-declared.
func (a *authenticator) enabled() bool { return len(a.keys) > 0 || a.mtls }

// mode names how callers are authenticated, for the log.
func (a *authenticator) mode() string {
	var m []string
	if len(a.keys) > 0 {
		m = append(m, "API keys")
	}
	if a.mtls {
		m = append(m, "client certificates")
	}
	if len(m) == 0 {
		return "self-declared principals"
	}
	return strings.Join(m, " or ")
}

// serverOptions are the gRPC server options of the authenticator: TLS
// credentials and the interceptors that authenticate every call.
func (a *authenticator) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
	if a.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(a.tls)))
	}
	return opts
}

// unauthenticatedMethod reports whether method is served without
// authentication: the health service (for probes) and server reflection
// (the schema only).
func unauthenticatedMethod(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.") || strings.HasPrefix(method, "/grpc.reflection.")
}

// authenticate returns the caller of ctx's call: proven by an API key or a
// client certificate, or, without authentication configured, nil (the
// principal is self-declared). A key that is wrong, or no credentials where
// they are required, is Unauthenticated.
func (a *authenticator) authenticate(ctx context.Context) (*acl.Caller, error) {
	if !a.enabled() {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(protocol.APIKeyHeader); len(v) > 0 && len(a.keys) > 0 {
		if c := a.keys[sha256.Sum256([]byte(v[0]))]; c != nil {
			return c, nil
		}
		return nil, errs.New(codes.Unauthenticated, "unknown API key")
	}
	if a.mtls {
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.PeerCertificates) > 0 {
				return certCaller(info.State.PeerCertificates[0])
			}
		}
	}
	switch {
	case len(a.keys) > 0 && a.mtls:
		return nil, errs.New(codes.Unauthenticated, "no credentials: send an API key as %s metadata or present a client certificate", protocol.APIKeyHeader)
	case len(a.keys) > 0:
		return nil, errs.New(codes.Unauthenticated, "no API key: send it as %s metadata", protocol.APIKeyHeader)
	}
	return nil, errs.New(codes.Unauthenticated, "no client certificate")
}

// certCaller is the caller a verified client certificate names: its subject
// common name or, without one, its first DNS name; its organizational units
// are its groups.
func certCaller(cert *x509.Certificate) (*acl.Caller, error) {
	p := cert.Subject.CommonName
	if p == "" && len(cert.DNSNames) > 0 {
		p = cert.DNSNames[0]
	}
	if !grain.ValidName(p) {
		return nil, errs.New(codes.Unauthenticated, "the client certificate names no usable principal (common name or first DNS name %q): want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(p))
	}
	var groups []string
	for _, ou := range cert.Subject.OrganizationalUnit {
		if grain.ValidName(ou) {
			groups = append(groups, ou)
		}
	}
	return &acl.Caller{Principal: p, Groups: groups}, nil
}

// callerFor returns the caller of a call: the authenticated one, which a
// declared principal (if any) must agree with, or, in development mode, the
// declared principal (default DefaultPrincipal).
func callerFor(proven *acl.Caller, declared string) (*acl.Caller, error) {
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

// declaredPrincipal is the principal metadata of a call, if any.
func declaredPrincipal(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(protocol.PrincipalHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if unauthenticatedMethod(info.FullMethod) {
		return h(ctx, req)
	}
	proven, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	c, err := callerFor(proven, declaredPrincipal(ctx))
	if err != nil {
		return nil, err
	}
	return h(acl.WithCaller(ctx, c), req)
}

// stream authenticates a stream. A Session declares its principal in its
// Hello, so in development mode the stream carries no caller yet.
func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if unauthenticatedMethod(info.FullMethod) {
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
