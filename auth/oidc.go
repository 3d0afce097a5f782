package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/names"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// OIDCConfig accepts bearer tokens issued by an OpenID provider: JSON Web
// Tokens signed with one of the provider's keys, which the server finds by
// discovery (Issuer + "/.well-known/openid-configuration") and keeps,
// fetching them again when a token names a key it does not hold (the
// provider rotated its keys). A token is taken when its signature is
// good, its issuer is Issuer, its audience holds Audience, and it has not
// expired (with a leeway of Leeway) and is not used before its "nbf".
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (--oidc-issuer), exactly as its
	// tokens' "iss" says. Empty: tokens are not accepted. An http:// issuer
	// is refused unless it is on a loopback address or AllowHTTP is set.
	Issuer string
	// Audience is what the tokens' "aud" must hold (--oidc-audience):
	// the identifier the provider knows the cluster's API by. Required
	// with Issuer.
	Audience string
	// PrincipalClaim names the claim that is the caller's principal
	// (--oidc-principal-claim). Default "sub". Its value must be a
	// principal name ([A-Za-z0-9][A-Za-z0-9_.@-]{0,127}).
	PrincipalClaim string
	// GroupsClaim names the claim that lists the caller's groups, for the
	// ACL's group rules (--oidc-groups-claim): an array of strings, or a
	// string. Default "groups". Values that are not valid names are left
	// out.
	GroupsClaim string
	// AllowHTTP allows an issuer on plain HTTP on a non-loopback address
	// (--oidc-allow-http): anyone on the path could then hand the server
	// keys of their own.
	AllowHTTP bool
	// Leeway is how long after its "exp" a token is still taken, for
	// clocks that differ a little. Default DefaultLeeway; negative: none.
	Leeway time.Duration
	// HTTPClient fetches the discovery document and the keys. Default: a
	// client with a 10 s timeout.
	HTTPClient *http.Client
}

// DefaultLeeway is OIDCConfig.Leeway's default.
const DefaultLeeway = 30 * time.Second

// Enabled reports whether tokens are accepted.
func (c *OIDCConfig) Enabled() bool { return c.Issuer != "" }

// validate checks c and fills in its defaults.
func (c *OIDCConfig) validate() error {
	if c.Audience == "" {
		return errs.New(codes.InvalidArgument, "auth: an OpenID issuer (--oidc-issuer) needs the audience its tokens are for (--oidc-audience)")
	}
	u, err := url.Parse(c.Issuer)
	if err != nil {
		return errs.New(codes.InvalidArgument, "auth: OpenID issuer %q: %w", c.Issuer, err)
	}
	switch u.Scheme {
	case "https":
	case "http":
		port := u.Port()
		if port == "" {
			port = "80"
		}
		if !c.AllowHTTP && !Loopback(net.JoinHostPort(u.Hostname(), port)) {
			return errs.New(codes.InvalidArgument, "auth: OpenID issuer %q is plain HTTP on an address that is not loopback: whoever is on the path could serve keys of their own; use https, or --oidc-allow-http", c.Issuer)
		}
	default:
		return errs.New(codes.InvalidArgument, "auth: OpenID issuer %q: want an https:// URL", c.Issuer)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errs.New(codes.InvalidArgument, "auth: OpenID issuer %q: want scheme://host[/path], without query or fragment", c.Issuer)
	}
	if c.PrincipalClaim == "" {
		c.PrincipalClaim = "sub"
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.Leeway < 0 {
		c.Leeway = 0
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return nil
}

// tokens verifies an OpenID provider's tokens. It discovers the provider
// at the first token it checks (so a silo starts while its provider is
// away), and again after a failed discovery, at most once per
// rediscoverAfter. Its verifier keeps the provider's keys, fetching them
// again for a token signed with a key it does not hold; every keysMaxAge
// it starts a new one, which fetches them afresh, so a key the provider no
// longer publishes (a compromised one) is not trusted for longer. A token
// it took is remembered (by its SHA-256) until it expires or the
// verifier is replaced, so a client that sends one token with every call
// costs one signature check, not one per call. Safe for concurrent use.
type tokens struct {
	cfg OIDCConfig
	now func() time.Time // time.Now; tests move it

	mu         sync.Mutex
	provider   *oidc.Provider        // nil until discovered
	pctx       context.Context       // the provider's, carrying the HTTP client
	verifier   *oidc.IDTokenVerifier // the provider's, with its keys
	verifierAt time.Time             // when verifier was made
	failed     time.Time             // when discovery last failed
	err        error                 // and why
	// gen counts the verifiers made; checked holds the tokens the
	// current one took (by SHA-256), so a token is verified once, not at
	// each call: an entry serves until its token expires (with the
	// leeway), and only while its verifier is the current one.
	gen     uint64
	checked map[[sha256.Size]byte]checkedToken
}

// checkedToken is a token a verifier took.
type checkedToken struct {
	caller *acl.Caller
	until  time.Time
	gen    uint64
}

// maxChecked bounds tokens.checked; past it the expired entries go, and
// if none has, all.
const maxChecked = 4096

const (
	// rediscoverAfter bounds how often a server asks a provider that could
	// not be discovered again.
	rediscoverAfter = 5 * time.Second
	// keysMaxAge is how long a verifier keeps the keys it fetched.
	keysMaxAge = 10 * time.Minute
)

func newTokens(cfg OIDCConfig) (*tokens, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &tokens{cfg: cfg, now: time.Now}, nil
}

// verifierFor returns the verifier and its generation, discovering the
// provider if need be, or the caller of raw (by its hash h) if the current
// verifier took it before. A provider that cannot be discovered is
// Unavailable.
func (t *tokens) verifierFor(ctx context.Context, h [sha256.Size]byte, now time.Time) (*oidc.IDTokenVerifier, uint64, *acl.Caller, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, err := t.verifierLocked(ctx, now)
	if err != nil {
		return nil, 0, nil, err
	}
	if e, ok := t.checked[h]; ok && e.gen == t.gen && now.Before(e.until) {
		return v, t.gen, e.caller, nil
	}
	return v, t.gen, nil, nil
}

// remember keeps a token the verifier of gen took.
func (t *tokens) remember(h [sha256.Size]byte, e checkedToken, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.gen != t.gen {
		return
	}
	if len(t.checked) >= maxChecked {
		for k, o := range t.checked {
			if o.gen != t.gen || !now.Before(o.until) {
				delete(t.checked, k)
			}
		}
		if len(t.checked) >= maxChecked {
			clear(t.checked)
		}
	}
	t.checked[h] = e
}

// verifierLocked is verifierFor's verifier; t.mu is held.
func (t *tokens) verifierLocked(ctx context.Context, now time.Time) (*oidc.IDTokenVerifier, error) {
	if t.provider == nil {
		if t.err != nil && now.Sub(t.failed) < rediscoverAfter {
			return nil, t.err
		}
		// The provider keeps this context for fetching keys later: it
		// must outlive the call that discovers it, and carries only the
		// client.
		pctx := oidc.ClientContext(context.WithoutCancel(ctx), t.cfg.HTTPClient)
		dctx, cancel := context.WithTimeout(pctx, 10*time.Second)
		defer cancel()
		p, err := oidc.NewProvider(oidc.ClientContext(dctx, t.cfg.HTTPClient), t.cfg.Issuer)
		if err != nil {
			t.failed, t.err = now, errs.New(codes.Unavailable, "the OpenID provider %s could not be discovered: %w", t.cfg.Issuer, err)
			return nil, t.err
		}
		t.provider, t.pctx, t.err = p, pctx, nil
	}
	if t.verifier == nil || now.Sub(t.verifierAt) >= keysMaxAge {
		// Expiry and "nbf" are checked in verify, with the leeway
		// (go-oidc checks them with none and 5 minutes).
		t.verifier = t.provider.VerifierContext(t.pctx, &oidc.Config{ClientID: t.cfg.Audience, SkipExpiryCheck: true})
		t.verifierAt = now
		t.gen++
		t.checked = make(map[[sha256.Size]byte]checkedToken)
	}
	return t.verifier, nil
}

// errNotYetValid is the cause of a token used before its "nbf" claim.
var errNotYetValid = errors.New("the token is not valid yet")

// verify returns the caller raw (a compact JWS) proves. A token that fails
// any check is Unauthenticated, saying why; a provider that cannot be
// reached is Unavailable.
func (t *tokens) verify(ctx context.Context, raw string) (*acl.Caller, error) {
	h := sha256.Sum256([]byte(raw))
	now := t.now()
	v, gen, c, err := t.verifierFor(ctx, h, now)
	if err != nil || c != nil {
		return c, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "checking the bearer token")
		}
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: %w", err)
	}
	if tok.Expiry.IsZero() {
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: it has no expiry (exp)")
	}
	if tok.Expiry.Add(t.cfg.Leeway).Before(now) {
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: it expired at %s", tok.Expiry.UTC().Format(time.RFC3339))
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: its claims: %w", err)
	}
	if raw, ok := claims["nbf"]; ok {
		var nbf float64
		if err := json.Unmarshal(raw, &nbf); err != nil {
			return nil, errs.New(codes.Unauthenticated, "bearer token refused: its nbf is not a number")
		}
		if at := time.Unix(int64(nbf), 0); now.Add(t.cfg.Leeway).Before(at) {
			return nil, errs.New(codes.Unauthenticated, "bearer token refused: %w: not before %s", errNotYetValid, at.UTC().Format(time.RFC3339))
		}
	}
	c, err = callerFromClaims(claims, t.cfg.PrincipalClaim, t.cfg.GroupsClaim)
	if err != nil {
		return nil, err
	}
	c.Expires = tok.Expiry.Add(t.cfg.Leeway)
	t.remember(h, checkedToken{caller: c, until: c.Expires, gen: gen}, now)
	return c, nil
}

// callerFromClaims reads a verified token's caller: the principal claim
// (a string naming a valid principal), the groups claim (strings; invalid
// names left out), and the scopes: "scope" (space-separated, RFC 9068) or
// "scp" (an array, or a space-separated string).
func callerFromClaims(claims map[string]json.RawMessage, principalClaim, groupsClaim string) (*acl.Caller, error) {
	var p string
	if raw, ok := claims[principalClaim]; !ok || json.Unmarshal(raw, &p) != nil {
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: its claim %q is missing or not a string", principalClaim)
	}
	if !names.Valid(p) {
		return nil, errs.New(codes.Unauthenticated, "bearer token refused: its claim %q, %q, is no usable principal: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", principalClaim, protocol.Clip(p))
	}
	c := &acl.Caller{Principal: p, Scoped: true}
	for _, g := range stringsClaim(claims[groupsClaim]) {
		if names.Valid(g) {
			c.Groups = append(c.Groups, g)
		}
	}
	if raw, ok := claims["scope"]; ok {
		c.Scopes = stringsClaim(raw)
	} else {
		c.Scopes = stringsClaim(claims["scp"])
	}
	return c, nil
}

// stringsClaim reads a claim that is an array of strings or a string of
// space-separated words; anything else is nothing.
func stringsClaim(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.Fields(s)
	}
	var list []any
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, v := range list {
		if s, ok := v.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// looksLikeJWT reports whether a bearer credential has the shape of a
// compact JWS (three base64url parts), so it is a token rather than an API
// key.
func looksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2
}

// endpoint returns the provider's OAuth 2.0 endpoints (its authorization
// and token endpoints), discovering it if need be.
func (t *tokens) endpoint(ctx context.Context) (oauth2.Endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := t.verifierLocked(ctx, t.now()); err != nil {
		return oauth2.Endpoint{}, err
	}
	return t.provider.Endpoint(), nil
}
