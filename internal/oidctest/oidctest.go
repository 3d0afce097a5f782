// Package oidctest is an OpenID provider for tests: a real HTTP server on
// loopback that serves discovery (/.well-known/openid-configuration), its
// signing keys as a JWKS (/keys), an authorization endpoint (/authorize)
// that signs in a set user at once, and a token endpoint (/token) that
// issues access tokens by the client credentials grant and the
// authorization code grant with PKCE. Its RSA keys are
// real and can be rotated while it runs; it also makes the tokens a
// server must refuse (forged, unsigned, expired, ...).
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Provider is a running OpenID provider. Safe for concurrent use.
type Provider struct {
	srv *httptest.Server

	mu      sync.Mutex
	keys    []*rsa.PrivateKey // published; the last signs
	kids    []string
	n       int               // keys made so far
	clients map[string]Client // client_id → client
	user    Claims            // who signs in at /authorize (nil: nobody)
	codes   map[string]grant  // authorization codes not yet exchanged

	keyFetches atomic.Int64
	issued     atomic.Int64
}

// Client is a client of the token endpoint: its secret, and the claims of
// the tokens it is issued (besides iss, aud, iat, exp).
type Client struct {
	Secret   string
	Audience string
	Claims   map[string]any
	// TTL is how long its tokens last. Default: an hour.
	TTL time.Duration
	// RedirectURIs are where /authorize may send its codes (the
	// authorization code grant); a client with none has no such grant.
	// A client without Secret is public: it must use PKCE (S256).
	RedirectURIs []string
}

// grant is an authorization code's: to whom, for which client and
// redirect, with which PKCE challenge.
type grant struct {
	client, redirect, challenge string
	claims                      Claims
}

// Start starts a provider on 127.0.0.1 with one signing key.
func Start() (*Provider, error) {
	p := &Provider{clients: make(map[string]Client), codes: make(map[string]grant)}
	if err := p.Rotate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /keys", p.jwks)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /authorize", p.authorize)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.srv = httptest.NewUnstartedServer(mux)
	p.srv.Listener.Close()
	p.srv.Listener = l
	p.srv.Start()
	return p, nil
}

// Close stops the server.
func (p *Provider) Close() { p.srv.Close() }

// Issuer is the provider's issuer URL.
func (p *Provider) Issuer() string { return p.srv.URL }

// TokenURL is the token endpoint.
func (p *Provider) TokenURL() string { return p.srv.URL + "/token" }

// Issued is how many tokens the token endpoint issued.
func (p *Provider) Issued() int64 { return p.issued.Load() }

// KeyFetches is how many times the keys were fetched.
func (p *Provider) KeyFetches() int64 { return p.keyFetches.Load() }

// Rotate makes a new signing key and stops publishing all but the one
// before it (so tokens signed just before the rotation still verify).
func (p *Provider) Rotate() error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.keys = append(p.keys, k)
	p.kids = append(p.kids, fmt.Sprintf("key-%d", p.n))
	if len(p.keys) > 2 {
		p.keys, p.kids = p.keys[len(p.keys)-2:], p.kids[len(p.kids)-2:]
	}
	return nil
}

// Drop stops publishing every key but the signing one: tokens signed with
// the others no longer verify.
func (p *Provider) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys, p.kids = p.keys[len(p.keys)-1:], p.kids[len(p.kids)-1:]
}

// SignIn makes /authorize sign in the user of claims (at least "sub")
// at once, without a page: the user's browser is sent back to the client
// with a code.
func (p *Provider) SignIn(claims Claims) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.user = claims
}

// AddClient registers a client of the token endpoint.
func (p *Provider) AddClient(id string, c Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[id] = c
}

// Claims are a token's claims. Standard returns the usual ones.
type Claims map[string]any

// Standard returns claims for sub and aud from this provider, issued now
// and valid for ttl.
func (p *Provider) Standard(sub, aud string, ttl time.Duration) Claims {
	now := time.Now()
	return Claims{"iss": p.Issuer(), "sub": sub, "aud": aud, "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
}

// Sign returns a token of claims signed with the current key.
func (p *Provider) Sign(c Claims) (string, error) {
	p.mu.Lock()
	k, kid := p.keys[len(p.keys)-1], p.kids[len(p.kids)-1]
	p.mu.Unlock()
	return SignWith(k, kid, c)
}

// SignWith returns a token of claims signed with k (RS256) under key id
// kid: with a key the provider does not publish, a forgery.
func SignWith(k *rsa.PrivateKey, kid string, c Claims) (string, error) {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	jws, err := s.Sign(b)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// Unsigned returns a token of claims with "alg": "none" and no signature.
func Unsigned(c Claims) string {
	b, _ := json.Marshal(c)
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	return h + "." + base64.RawURLEncoding.EncodeToString(b) + "."
}

// Tamper returns tok with its claims replaced by c, the signature kept.
func Tamper(tok string, c Claims) string {
	parts := strings.Split(tok, ".")
	b, _ := json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	iss := p.Issuer()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                iss,
		"jwks_uri":                              iss + "/keys",
		"token_endpoint":                        iss + "/token",
		"authorization_endpoint":                iss + "/authorize",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"grant_types_supported":                 []string{"client_credentials", "authorization_code"},
		"code_challenge_methods_supported":      []string{"S256"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, _ *http.Request) {
	p.keyFetches.Add(1)
	p.mu.Lock()
	var set jose.JSONWebKeySet
	for i, k := range p.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: p.kids[i], Algorithm: string(jose.RS256), Use: "sig"})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(set)
}

// authorize serves the authorization endpoint: for a registered client and
// redirect URI, with a PKCE challenge (S256), the signed-in user's code
// goes back to the redirect URI with the state.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	defer p.mu.Unlock()
	c, known := p.clients[q.Get("client_id")]
	redirect := q.Get("redirect_uri")
	if !known || !slices.Contains(c.RedirectURIs, redirect) {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	u, err := url.Parse(redirect)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	back := u.Query()
	back.Set("state", q.Get("state"))
	switch {
	case q.Get("response_type") != "code":
		back.Set("error", "unsupported_response_type")
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		back.Set("error", "invalid_request")
		back.Set("error_description", "PKCE (S256) is required")
	case p.user == nil:
		back.Set("error", "access_denied")
	default:
		var b [16]byte
		rand.Read(b[:])
		code := base64.RawURLEncoding.EncodeToString(b[:])
		claims := Claims{}
		for k, v := range p.user {
			claims[k] = v
		}
		if s := q.Get("scope"); s != "" {
			claims["scope"] = s
		}
		p.codes[code] = grant{client: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge"), claims: claims}
		back.Set("code", code)
	}
	u.RawQuery = back.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// exchange serves the authorization code grant: the code, its client and
// redirect URI, and the PKCE verifier of its challenge.
func (p *Provider) exchange(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	p.mu.Lock()
	g, found := p.codes[r.PostFormValue("code")]
	delete(p.codes, r.PostFormValue("code"))
	c := p.clients[id]
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	if !found || g.client != id || g.redirect != r.PostFormValue("redirect_uri") || c.Secret != secret ||
		base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant"})
		return
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	claims := p.Standard("", c.Audience, ttl)
	for k, v := range g.claims {
		claims[k] = v
	}
	tok, err := p.Sign(claims)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	claims["aud"] = id
	idTok, err := p.Sign(claims)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.issued.Add(1)
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "id_token": idTok, "token_type": "Bearer", "expires_in": int(ttl / time.Second)})
}

// token serves the token endpoint: the client credentials grant
// (client_secret_basic or client_secret_post) and the authorization code
// grant (exchange).
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.PostFormValue("grant_type") == "authorization_code" {
		p.exchange(w, r)
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	p.mu.Lock()
	c, known := p.clients[id]
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.PostFormValue("grant_type") != "client_credentials" || !known || c.Secret != secret {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
		return
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	claims := p.Standard(id, c.Audience, ttl)
	for k, v := range c.Claims {
		claims[k] = v
	}
	if s := r.PostFormValue("scope"); s != "" {
		claims["scope"] = s
	}
	tok, err := p.Sign(claims)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.issued.Add(1)
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(ttl / time.Second)})
}
