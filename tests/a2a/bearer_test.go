package a2atests

import (
	"crypto/rand"
	"crypto/rsa"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/oidctest"
)

// The official JavaScript SDK, an independent client, with bearer tokens
// of an OpenID provider the test runs, against a silo process started
// with --oidc-issuer: a good token's send is served, and tokens expired,
// not yet valid, forged, for another audience or issuer, or unsigned are
// unauthenticated (tests/a2ajs/bearer.mjs).
func TestJSBearer(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "a2ajs")
	installJS(t, dir)
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e := etcdtest.Start(t)
	s := startSilo(t, e, "/js-bearer/", "jsbearer", nil, "--oidc-issuer", p.Issuer(), "--oidc-audience", "agentsilo")
	good := p.Standard("alice", "agentsilo", time.Hour)
	with := func(k string, v any) oidctest.Claims {
		c := oidctest.Claims{}
		for k, v := range good {
			c[k] = v
		}
		c[k] = v
		return c
	}
	sign := func(c oidctest.Claims) string {
		tok, err := p.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := oidctest.SignWith(other, "key-1", good)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(dir, "bearer.mjs"), "http://" + s.a2a, p.Issuer(), sign(good),
		sign(with("exp", time.Now().Add(-time.Hour).Unix())),
		sign(with("nbf", time.Now().Add(time.Hour).Unix())),
		forged,
		sign(with("aud", "someone-else")),
		sign(with("iss", "https://evil.example")),
		oidctest.Unsigned(good),
	}
	out, err := exec.CommandContext(t.Context(), "node", args...).CombinedOutput()
	t.Logf("node bearer.mjs:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\nall ok") || strings.Count(string(out), "\nok ") < 8 {
		t.Fatalf("the JavaScript client: %v", err)
	}
}
