// Package oidctest is an OpenID provider for tests: a real HTTP server on
// loopback that serves discovery (/.well-known/openid-configuration), its
// signing keys as a JWKS (/keys), and a token endpoint (/token) that
// issues access tokens by the client credentials grant. Its RSA keys are
// real and can be rotated while it runs; it also makes the tokens a
// server must refuse (forged, unsigned, expired, ...).
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
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
}

// Start starts a provider on 127.0.0.1 with one signing key.
func Start() (*Provider, error) {
	p := &Provider{clients: make(map[string]Client)}
	if err := p.Rotate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /keys", p.jwks)
	mux.HandleFunc("POST /token", p.token)
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
		"grant_types_supported":                 []string{"client_credentials"},
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

// token serves the client credentials grant (client_secret_basic or
// client_secret_post).
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
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
