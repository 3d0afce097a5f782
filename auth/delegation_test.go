package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func writeRSAKey(t *testing.T, bits int) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestDelegator: a Delegator's tokens verify, with go-oidc, against the
// discovery and keys its Handler serves under its issuer's path, for
// their audience only; this server's own token check (an Authenticator
// with the Delegator as its provider) takes them too.
func TestDelegator(t *testing.T) {
	key := writeRSAKey(t, 2048)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	issuer := srv.URL + "/cluster"
	d, err := NewDelegator(issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(d.Pattern(), d.Handler())
	tok, err := d.Token("alice", "https://agent.example.com", "A2A:alice:out", []string{"weather:read"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := oidc.ClientContext(t.Context(), srv.Client())
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	idt, err := p.VerifierContext(ctx, &oidc.Config{ClientID: "https://agent.example.com"}).Verify(ctx, tok)
	if err != nil || idt.Subject != "alice" || time.Until(idt.Expiry) > DelegationTTL {
		t.Fatalf("verify: %v, %v", idt, err)
	}
	if _, err := p.VerifierContext(ctx, &oidc.Config{ClientID: "https://other.example.com"}).Verify(ctx, tok); err == nil {
		t.Fatal("verified for another audience")
	}
	a, err := New(Config{OIDC: OIDCConfig{Issuer: issuer, Audience: "https://agent.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if c, err := a.AuthenticateHTTP(r); err != nil || c.Principal != "alice" || c.MissingScope([]string{"weather:read"}) != "" {
		t.Fatalf("an agentsilo server taking the cluster's tokens: %+v, %v", c, err)
	}

	for name, f := range map[string]func() (*Delegator, error){
		"no file":       func() (*Delegator, error) { return NewDelegator(issuer, filepath.Join(t.TempDir(), "none")) },
		"not PEM":       func() (*Delegator, error) { return NewDelegator(issuer, writeFile(t, "nothing")) },
		"small RSA":     func() (*Delegator, error) { return NewDelegator(issuer, writeRSAKey(t, 1024)) },
		"bad issuer":    func() (*Delegator, error) { return NewDelegator("ftp://x", key) },
		"issuer, query": func() (*Delegator, error) { return NewDelegator("https://x/?a=b", key) },
	} {
		if _, err := f(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
