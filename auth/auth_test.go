package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func TestNew(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`{"keys": [{"sha256": "`+keyHash("k")+`", "principal": "alice", "groups": ["admins"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{KeyFile: keys})
	if err != nil || !a.Enabled() || !a.APIKeys() || a.MutualTLS() || a.keys[sha256.Sum256([]byte("k"))].Principal != "alice" {
		t.Fatalf("key file: %v, %v", a, err)
	}
	if a.Mode() != "API keys" || a.TLSConfig() != nil {
		t.Fatalf("mode %q, TLS %v", a.Mode(), a.TLSConfig())
	}
	for name, cfg := range map[string]Config{
		"missing file":     {KeyFile: filepath.Join(t.TempDir(), "none.json")},
		"short hash":       {Keys: []APIKey{{SHA256: "abcd", Principal: "a"}}},
		"bad principal":    {Keys: []APIKey{{SHA256: keyHash("k"), Principal: "a b"}}},
		"bad group":        {Keys: []APIKey{{SHA256: keyHash("k"), Principal: "a", Groups: []string{"x y"}}}},
		"cert without key": {TLSCert: "x.pem"},
		"CA without TLS":   {TLSClientCA: "ca.pem"},
	} {
		if _, err := New(cfg); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// TestAuthenticateHTTP: an HTTP caller is proven by its key (header or
// bearer token), or declares its principal where nothing is configured.
func TestAuthenticateHTTP(t *testing.T) {
	a, err := New(Config{Keys: []APIKey{{SHA256: keyHash("k"), Principal: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, header, value, principal string
		want                           codes.Code
	}{
		{"key", "x-api-key", "k", "", codes.OK},
		{"bearer", "Authorization", "Bearer k", "", codes.OK},
		{"wrong key", "x-api-key", "nope", "", codes.Unauthenticated},
		{"no key", "", "", "", codes.Unauthenticated},
		{"other principal", "x-api-key", "k", "bob", codes.PermissionDenied},
		{"same principal", "x-api-key", "k", "alice", codes.OK},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.header != "" {
			r.Header.Set(c.header, c.value)
		}
		if c.principal != "" {
			r.Header.Set("x-agentsilo-principal", c.principal)
		}
		caller, err := a.AuthenticateHTTP(r)
		if status.Code(err) != c.want || (err == nil && caller.Principal != "alice") {
			t.Errorf("%s: %v, %v; want %v", c.name, caller, err, c.want)
		}
	}
	open, err := New(Config{})
	if err != nil || open.Enabled() || open.Mode() != "self-declared principals" {
		t.Fatalf("no config: %v %v", open, err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	if c, err := open.AuthenticateHTTP(r); err != nil || c.Principal != DefaultPrincipal {
		t.Fatalf("declared none: %v, %v", c, err)
	}
	r.Header.Set("x-agentsilo-principal", "bad name")
	if _, err := open.AuthenticateHTTP(r); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad declared principal: %v, want InvalidArgument", err)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.0.0.12:1": true, "[::1]:80": true, "localhost:7070": true,
		"0.0.0.0:7070": false, "10.0.0.1:7070": false, "example.com:80": false, ":7070": false, "127.0.0.1": false,
	} {
		if Loopback(addr) != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, !want, want)
		}
		err := CheckLoopback("gateway", addr)
		if (err == nil) != want || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("CheckLoopback(%q) = %v", addr, err)
		}
	}
}
