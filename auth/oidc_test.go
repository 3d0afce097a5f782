package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/internal/oidctest"
)

func provider(t testing.TB) *oidctest.Provider {
	t.Helper()
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func sign(t testing.TB, p *oidctest.Provider, c oidctest.Claims) string {
	t.Helper()
	tok, err := p.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// badTokens are the tokens every surface must refuse with Unauthenticated,
// by name.
func badTokens(t testing.TB, p *oidctest.Provider, aud string) map[string]string {
	t.Helper()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := p.Standard("alice", aud, time.Hour)
	with := func(k string, v any) oidctest.Claims {
		c := oidctest.Claims{}
		for k, v := range good {
			c[k] = v
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	forged, err := oidctest.SignWith(other, "key-1", good)
	if err != nil {
		t.Fatal(err)
	}
	unknownKey, err := oidctest.SignWith(other, "key-unknown", good)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"expired":        sign(t, p, with("exp", time.Now().Add(-time.Hour).Unix())),
		"not yet valid":  sign(t, p, with("nbf", time.Now().Add(time.Hour).Unix())),
		"forged":         forged,
		"unknown key":    unknownKey,
		"other audience": sign(t, p, with("aud", "someone-else")),
		"other issuer":   sign(t, p, with("iss", "https://evil.example")),
		"alg none":       oidctest.Unsigned(good),
		"tampered":       oidctest.Tamper(sign(t, p, good), with("sub", "mallory")),
		"no expiry":      sign(t, p, with("exp", nil)),
		"no subject":     sign(t, p, with("sub", nil)),
		"bad principal":  sign(t, p, with("sub", "a b")),
		"subject number": sign(t, p, with("sub", 42)),
		"not a token":    "abc.def.ghi",
		"garbage":        "...",
		"api key shape":  "not-a-jwt",
	}
}

func tokenAuth(t testing.TB, p *oidctest.Provider, extra ...func(*Config)) *Authenticator {
	t.Helper()
	cfg := Config{OIDC: OIDCConfig{Issuer: p.Issuer(), Audience: "agentsilo"}}
	for _, f := range extra {
		f(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestTokens: a good token proves its subject, groups and scopes over HTTP
// and gRPC; every bad one is Unauthenticated, and the server goes on
// taking good ones.
func TestTokens(t *testing.T) {
	p := provider(t)
	a := tokenAuth(t, p)
	if !a.Enabled() || a.APIKeys() {
		t.Fatalf("enabled %v, keys %v", a.Enabled(), a.APIKeys())
	}
	claims := p.Standard("alice", "agentsilo", time.Hour)
	claims["groups"] = []string{"admins", "not valid!"}
	claims["scope"] = "openid payments:write"
	good := sign(t, p, claims)

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+good)
	c, err := a.AuthenticateHTTP(r)
	if err != nil || c.Principal != "alice" || len(c.Groups) != 1 || c.Groups[0] != "admins" || !c.Scoped || c.MissingScope([]string{"payments:write"}) != "" || c.MissingScope([]string{"payments:read"}) != "payments:read" {
		t.Fatalf("good token over HTTP: %+v, %v", c, err)
	}
	tcp, _ := whoami(t, a)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+good)
	if got, err := ask(ctx, t, tcp, insecure.NewCredentials(), nil); err != nil || got != "alice admins" {
		t.Fatalf("good token over gRPC: %q, %v", got, err)
	}
	for name, tok := range badTokens(t, p, "agentsilo") {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if c, err := a.AuthenticateHTTP(r); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s over HTTP: %v, %v; want Unauthenticated", name, c, err)
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
		if got, err := ask(ctx, t, tcp, insecure.NewCredentials(), nil); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s over gRPC: %q, %v; want Unauthenticated", name, got, err)
		}
	}
	if got, err := ask(ctx, t, tcp, insecure.NewCredentials(), nil); err != nil || got != "alice admins" {
		t.Fatalf("good token after the bad ones: %q, %v", got, err)
	}
	// No credentials, or another scheme.
	if _, err := ask(t.Context(), t, tcp, insecure.NewCredentials(), nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v", err)
	}
	basic := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic YTpi")
	if _, err := ask(basic, t, tcp, insecure.NewCredentials(), nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("basic: %v", err)
	}
}

// TestTokenLeeway: a token a little past its expiry is still taken; the
// leeway is configurable.
func TestTokenLeeway(t *testing.T) {
	p := provider(t)
	c := p.Standard("alice", "agentsilo", 0)
	c["exp"] = time.Now().Add(-10 * time.Second).Unix()
	tok := sign(t, p, c)
	for _, tc := range []struct {
		leeway time.Duration
		want   codes.Code
	}{{0, codes.OK}, {-1, codes.Unauthenticated}, {5 * time.Second, codes.Unauthenticated}} {
		a := tokenAuth(t, p, func(c *Config) { c.OIDC.Leeway = tc.leeway })
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if _, err := a.AuthenticateHTTP(r); status.Code(err) != tc.want {
			t.Errorf("leeway %v: %v, want %v", tc.leeway, err, tc.want)
		}
	}
}

// TestTokenKeyRotation: the provider rotates its key while the server
// runs; the server fetches the keys again for a token of the new key, and
// takes tokens of the old key while the provider publishes it.
func TestTokenKeyRotation(t *testing.T) {
	p := provider(t)
	a := tokenAuth(t, p)
	check := func(tok string) error {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		_, err := a.AuthenticateHTTP(r)
		return err
	}
	old := sign(t, p, p.Standard("alice", "agentsilo", time.Hour))
	for range 3 {
		if err := check(old); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.KeyFetches(); n != 1 {
		t.Fatalf("%d key fetches for three checks, want 1 (cached)", n)
	}
	if err := p.Rotate(); err != nil {
		t.Fatal(err)
	}
	fresh := sign(t, p, p.Standard("alice", "agentsilo", time.Hour))
	if err := check(fresh); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
	if n := p.KeyFetches(); n != 2 {
		t.Fatalf("%d key fetches after the rotation, want 2", n)
	}
	if err := check(old); err != nil {
		t.Fatalf("token of the old key, still published: %v", err)
	}
	p.Drop()
	if err := check(old); err != nil {
		t.Fatalf("token of a dropped key, before the keys are fetched again: %v", err)
	}
	later := time.Now().Add(keysMaxAge)
	a.tokens.now = func() time.Time { return later }
	if err := check(old); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token of a key no longer published, keysMaxAge later: %v", err)
	}
	if err := check(fresh); err != nil {
		t.Fatalf("token of the new key after the drop: %v", err)
	}
}

// TestTokenProviderAway: a provider that cannot be discovered makes token
// checks Unavailable (the server starts anyway); API keys beside it work.
func TestTokenProviderAway(t *testing.T) {
	p := provider(t)
	tok := sign(t, p, p.Standard("alice", "agentsilo", time.Hour))
	p.Close()
	a := tokenAuth(t, p, func(c *Config) { c.Keys = []APIKey{{SHA256: keyHash("k"), Principal: "bob"}} })
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if _, err := a.AuthenticateHTTP(r); status.Code(err) != codes.Unavailable {
		t.Fatalf("provider away: %v, want Unavailable", err)
	}
	r.Header.Set("Authorization", "Bearer k")
	if c, err := a.AuthenticateHTTP(r); err != nil || c.Principal != "bob" || c.Scoped {
		t.Fatalf("API key beside tokens: %v, %v", c, err)
	}
}

func TestOIDCConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  OIDCConfig
		want codes.Code
	}{
		"https":                 {OIDCConfig{Issuer: "https://id.example.com", Audience: "a"}, codes.OK},
		"https with a path":     {OIDCConfig{Issuer: "https://id.example.com/realms/x", Audience: "a"}, codes.OK},
		"http on loopback":      {OIDCConfig{Issuer: "http://127.0.0.1:5556", Audience: "a"}, codes.OK},
		"http on localhost":     {OIDCConfig{Issuer: "http://localhost:5556/dex", Audience: "a"}, codes.OK},
		"http elsewhere":        {OIDCConfig{Issuer: "http://id.example.com", Audience: "a"}, codes.InvalidArgument},
		"http elsewhere, allow": {OIDCConfig{Issuer: "http://id.example.com", Audience: "a", AllowHTTP: true}, codes.OK},
		"no audience":           {OIDCConfig{Issuer: "https://id.example.com"}, codes.InvalidArgument},
		"other scheme":          {OIDCConfig{Issuer: "ftp://id.example.com", Audience: "a"}, codes.InvalidArgument},
		"no host":               {OIDCConfig{Issuer: "https://", Audience: "a"}, codes.InvalidArgument},
		"query":                 {OIDCConfig{Issuer: "https://id.example.com/?x=1", Audience: "a"}, codes.InvalidArgument},
	} {
		_, err := New(Config{OIDC: tc.cfg})
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestClaims: the principal and groups claims are configurable; groups and
// scopes are an array or a space-separated string.
func TestClaims(t *testing.T) {
	raw := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	c, err := callerFromClaims(raw(`{"sub":"x","email":"bob@example.com","roles":"ops dev","scp":["a","b"]}`), "email", "roles")
	if err != nil || c.Principal != "bob@example.com" || len(c.Groups) != 2 || len(c.Scopes) != 2 {
		t.Fatalf("%+v, %v", c, err)
	}
	if _, err := callerFromClaims(raw(`{"sub":"x"}`), "email", "roles"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("missing principal claim: %v", err)
	}
}

// FuzzTokens: no token, however made, panics or is taken unless the
// provider signed it; anything refused is Unauthenticated.
func FuzzTokens(f *testing.F) {
	p := provider(f)
	a := tokenAuth(f, p)
	good := sign(f, p, p.Standard("alice", "agentsilo", time.Hour))
	f.Add(good)
	for _, tok := range badTokens(f, p, "agentsilo") {
		f.Add(tok)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		md := metadata.Pairs("authorization", "Bearer "+tok)
		c, err := a.authenticate(metadata.NewIncomingContext(context.Background(), md))
		switch {
		case err == nil && (c == nil || c.Principal != "alice" || tok != good):
			t.Fatalf("taken: %q as %+v", tok, c)
		case err != nil && status.Code(err) != codes.Unauthenticated:
			t.Fatalf("%q: %v, want Unauthenticated", tok, err)
		}
	})
}

// FuzzClaims: any claims either make a caller with a valid principal or
// are Unauthenticated.
func FuzzClaims(f *testing.F) {
	f.Add(`{"sub":"alice","groups":["a","b c"],"scope":"x y"}`)
	f.Add(`{"sub":1,"groups":"a b","scp":["x",2]}`)
	f.Add(`{"sub":"` + string(make([]byte, 200)) + `"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &m) != nil {
			return
		}
		c, err := callerFromClaims(m, "sub", "groups")
		if err != nil {
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%v", err)
			}
			return
		}
		if c.Principal == "" || !c.Scoped {
			t.Fatalf("%+v", c)
		}
	})
}

// TestTokenChecked: a token is verified once and then taken from the
// server's memory of it, until it expires (with the leeway): then it is
// refused like any expired token.
func TestTokenChecked(t *testing.T) {
	p := provider(t)
	a := tokenAuth(t, p)
	tok := sign(t, p, p.Standard("alice", "agentsilo", time.Minute))
	check := func() error {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		_, err := a.AuthenticateHTTP(r)
		return err
	}
	for range 3 {
		if err := check(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.tokens.checked); n != 1 {
		t.Fatalf("%d tokens remembered, want 1", n)
	}
	later := time.Now().Add(time.Minute + DefaultLeeway + time.Second)
	a.tokens.now = func() time.Time { return later }
	if err := check(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a remembered token past its expiry: %v, want Unauthenticated", err)
	}
}
