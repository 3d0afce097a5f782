package auth

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The names of OAuth 2.0 Token Exchange (RFC 8693) that a Delegator's
// token endpoint speaks.
const (
	// GrantTokenExchange is the grant_type of a token exchange.
	GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	// TokenTypeAccessToken is the token type of an access token, what
	// the endpoint takes as subject_token_type and issues.
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	// TokenTypeJWT is the token type of a JWT, taken as
	// subject_token_type too.
	TokenTypeJWT = "urn:ietf:params:oauth:token-type:jwt"
)

// Bounds of the token endpoint.
const (
	maxExchangeBody = 64 << 10 // a request's form
	maxAudience     = 2048     // the audience asked for
	maxActDepth     = 8        // actors in a token's act chain
	exchangeLeeway  = 30 * time.Second
)

// TokenURL is the URL of the Delegator's token endpoint (ISSUER/token),
// which its discovery document names as its token_endpoint.
func (d *Delegator) TokenURL() string { return d.issuer + "/token" }

// TokenPath is the path ExchangeHandler is mounted at: the issuer's path
// followed by /token.
func (d *Delegator) TokenPath() string { return d.path + "/token" }

// ExchangeHandler serves the Delegator's token endpoint, OAuth 2.0 Token
// Exchange (RFC 8693): a client, authenticated by a (its API key, its
// token, its client certificate: the silo's own means), posts a form with
// grant_type GrantTokenExchange, a subject_token (a token of a's OpenID
// provider, or one this Delegator issued), its subject_token_type
// (TokenTypeAccessToken or TokenTypeJWT), the audience the new token is
// for (or a resource URI) and, optionally, the scopes it should carry
// (space-separated). The answer is a token the Delegator signs for the
// subject token's principal, for that audience, with the client as its
// actor (act.sub, the subject token's own actors nested under it), valid
// for DelegationTTL at most and not past the subject token: down-scoped to
// the scopes asked for, each of which the subject token must hold (else
// invalid_scope), or with the subject token's scopes when none is asked
// for. Errors are RFC 6749's: a JSON body with error and
// error_description, status 400 (401 invalid_client for a client it
// cannot authenticate).
func (d *Delegator) ExchangeHandler(a *Authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.exchange(w, r, a) })
}

// exchangeError is an RFC 6749 error answer.
type exchangeError struct {
	status int
	code   string
	desc   string
}

func badExchange(code, format string, args ...any) *exchangeError {
	return &exchangeError{status: http.StatusBadRequest, code: code, desc: errs.New(codes.InvalidArgument, format, args...).Error()}
}

func (d *Delegator) exchange(w http.ResponseWriter, r *http.Request, a *Authenticator) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeExchangeError(w, &exchangeError{status: http.StatusMethodNotAllowed, code: "invalid_request", desc: "the token endpoint takes POST"})
		return
	}
	res, e := d.exchangeToken(w, r, a)
	if e != nil {
		writeExchangeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// exchangeResult is a token exchange's answer (RFC 8693 section 2.2.1).
type exchangeResult struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope,omitempty"`
}

func (d *Delegator) exchangeToken(w http.ResponseWriter, r *http.Request, a *Authenticator) (*exchangeResult, *exchangeError) {
	r.Body = http.MaxBytesReader(w, r.Body, maxExchangeBody)
	if err := r.ParseForm(); err != nil {
		return nil, badExchange("invalid_request", "the request's form: %w", err)
	}
	var client string
	if a != nil {
		c, err := a.AuthenticateHTTP(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentsilo"`)
			return nil, &exchangeError{status: http.StatusUnauthorized, code: "invalid_client", desc: err.Error()}
		}
		client = c.Principal
	}
	if client == "" {
		client = DefaultPrincipal
	}
	f := r.PostForm
	one := func(name string) (string, *exchangeError) {
		switch v := f[name]; len(v) {
		case 0:
			return "", nil
		case 1:
			return v[0], nil
		default:
			return "", badExchange("invalid_request", "%s given %d times", name, len(v))
		}
	}
	gt, e := one("grant_type")
	if e != nil {
		return nil, e
	}
	if gt != GrantTokenExchange {
		return nil, badExchange("unsupported_grant_type", "grant_type %q: this endpoint exchanges tokens (%s)", clipForm(gt), GrantTokenExchange)
	}
	if _, ok := f["actor_token"]; ok {
		return nil, badExchange("invalid_request", "actor_token is not taken: the authenticated client is the actor")
	}
	for _, name := range []string{"subject_token_type", "requested_token_type"} {
		tt, e := one(name)
		if e != nil {
			return nil, e
		}
		if tt != TokenTypeAccessToken && tt != TokenTypeJWT && (tt != "" || name == "subject_token_type") {
			return nil, badExchange("invalid_request", "%s %q: want %s or %s", name, clipForm(tt), TokenTypeAccessToken, TokenTypeJWT)
		}
	}
	raw, e := one("subject_token")
	if e != nil {
		return nil, e
	}
	if raw == "" {
		return nil, badExchange("invalid_request", "no subject_token")
	}
	aud, e := one("audience")
	if e != nil {
		return nil, e
	}
	resource, e := one("resource")
	if e != nil {
		return nil, e
	}
	switch {
	case aud == "" && resource == "":
		return nil, badExchange("invalid_request", "no audience: say whom the token is for (audience, or resource)")
	case aud != "" && resource != "" && aud != resource:
		return nil, badExchange("invalid_target", "audience and resource differ: give one")
	case aud == "":
		aud = resource
	}
	if len(aud) > maxAudience || !utf8.ValidString(aud) || strings.ContainsFunc(aud, unicode.IsControl) {
		return nil, badExchange("invalid_target", "audience: at most %d bytes of UTF-8 without control characters", maxAudience)
	}
	scope, e := one("scope")
	if e != nil {
		return nil, e
	}
	sub, err := d.subject(r, a, raw)
	if err != nil {
		if errs.Code(err) == codes.Unavailable {
			return nil, &exchangeError{status: http.StatusServiceUnavailable, code: "temporarily_unavailable", desc: err.Error()}
		}
		return nil, badExchange("invalid_request", "subject_token refused: %w", err)
	}
	scopes := sub.scopes
	if scope != "" {
		scopes = strings.Fields(scope)
		for _, s := range scopes {
			if !slices.Contains(sub.scopes, s) {
				return nil, badExchange("invalid_scope", "the subject token lacks scope %q", clipForm(s))
			}
		}
	}
	act := map[string]any{"sub": client}
	if sub.act != nil {
		if actDepth(sub.act) >= maxActDepth {
			return nil, badExchange("invalid_request", "the subject token went through %d actors already, the most there may be", maxActDepth)
		}
		act["act"] = sub.act
	}
	tok, exp, err := d.sign(sub.principal, aud, act, scopes, sub.until)
	if err != nil {
		return nil, &exchangeError{status: http.StatusInternalServerError, code: "server_error", desc: err.Error()}
	}
	return &exchangeResult{
		AccessToken: tok, IssuedTokenType: TokenTypeAccessToken, TokenType: "Bearer",
		ExpiresIn: max(int64(exp.Sub(d.now())/time.Second), 0), Scope: strings.Join(scopes, " "),
	}, nil
}

// subjectToken is what a verified subject token says.
type subjectToken struct {
	principal string
	scopes    []string
	act       map[string]any // its actors (a token of this Delegator's)
	until     time.Time      // its expiry
}

// subject verifies raw: a token this Delegator signed (by its key id), or
// one of a's OpenID provider.
func (d *Delegator) subject(r *http.Request, a *Authenticator, raw string) (*subjectToken, error) {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA})
	if err != nil {
		return nil, errs.New(codes.Unauthenticated, "not a signed JWT: %w", err)
	}
	if len(tok.Headers) == 1 && tok.Headers[0].KeyID == d.jwk.KeyID {
		return d.own(tok)
	}
	if a == nil || a.tokens == nil {
		return nil, errs.New(codes.Unauthenticated, "not a token of this cluster's, and the silo takes no OpenID provider's (--oidc-issuer)")
	}
	c, err := a.tokens.verify(r.Context(), raw)
	if err != nil {
		return nil, err
	}
	return &subjectToken{principal: c.Principal, scopes: c.Scopes, until: c.Expires}, nil
}

// own verifies tok, signed with the Delegator's key id.
func (d *Delegator) own(tok *jwt.JSONWebToken) (*subjectToken, error) {
	var std jwt.Claims
	var extra struct {
		Scope string         `json:"scope"`
		Act   map[string]any `json:"act"`
	}
	if err := tok.Claims(d.jwk.Key, &std, &extra); err != nil {
		return nil, errs.New(codes.Unauthenticated, "its signature: %w", err)
	}
	if std.Expiry == nil {
		return nil, errs.New(codes.Unauthenticated, "it has no expiry (exp)")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: d.issuer, Time: d.now()}, exchangeLeeway); err != nil {
		return nil, errs.New(codes.Unauthenticated, "%w", err)
	}
	if std.Subject == "" {
		return nil, errs.New(codes.Unauthenticated, "it names no subject (sub)")
	}
	return &subjectToken{principal: std.Subject, scopes: strings.Fields(extra.Scope), act: extra.Act, until: std.Expiry.Time().Add(exchangeLeeway)}, nil
}

// actDepth is the number of actors in an act claim's chain.
func actDepth(act map[string]any) int {
	n := 0
	for act != nil && n <= maxActDepth {
		n++
		act, _ = act["act"].(map[string]any)
	}
	return n
}

// writeExchangeError writes e as RFC 6749 section 5.2 has it.
func writeExchangeError(w http.ResponseWriter, e *exchangeError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]string{"error": e.code, "error_description": e.desc})
}

// clipForm shortens a form value for an error.
func clipForm(s string) string {
	if len(s) <= 128 && utf8.ValidString(s) {
		return s
	}
	return strconv.QuoteToASCII(s[:min(len(s), 128)]) + "…"
}
