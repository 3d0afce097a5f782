package dashboard

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
)

// TestCertSession: a request over TLS with a verified client certificate
// is its principal, with a CSRF token bound to the certificate, and its
// calls vouch for it; a request without one (the plain HTTP port) is no
// session, whatever its headers say.
func TestCertSession(t *testing.T) {
	ca, err := certstest.NewCA(t.TempDir(), "client CA")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := ca.Issue("silo", nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{TLSCert: srvCert, TLSKey: srvKey, TLSClientCA: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Silo: "s0", Conn: noConn{}, Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	state := func(cn string) *tls.ConnectionState {
		c, k, err := ca.Issue(cn, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	carol, dave := state("carol"), state("dave")
	r := httptest.NewRequest("GET", "/ui/", nil)
	r.Header.Set("x-agentsilo-vouched-principal", "carol")
	r.Header.Set("x-agentsilo-principal", "carol")
	if s, err := d.current(r); s != nil || err != nil {
		t.Fatalf("plain request: %v, %v", s, err)
	}
	r.TLS = carol
	s1, err := d.current(r)
	if err != nil || s1 == nil || s1.caller.Principal != "carol" || s1.cert == nil {
		t.Fatalf("carol's certificate: %+v, %v", s1, err)
	}
	s2, _ := d.current(r)
	r.TLS = dave
	s3, _ := d.current(r)
	if s1.csrf != s2.csrf || s1.csrf == s3.csrf || s3.caller.Principal != "dave" {
		t.Errorf("CSRF tokens: carol %q and %q, dave %q (%s)", s1.csrf, s2.csrf, s3.csrf, s3.caller.Principal)
	}
	md, _ := metadata.FromOutgoingContext(s1.ctx(t.Context()))
	if v := md.Get("x-agentsilo-vouched-principal"); len(v) != 1 || v[0] != "carol" || len(md.Get("x-api-key")) != 0 {
		t.Errorf("carol's calls carry %v", md)
	}
	unverified := *carol
	unverified.VerifiedChains = nil
	r.TLS = &unverified
	if s, err := d.current(r); s != nil || err != nil {
		t.Errorf("an unverified certificate: %v, %v", s, err)
	}
}

func TestCertURL(t *testing.T) {
	for _, c := range []struct{ addr, host, want string }{
		{"127.0.0.1:8443", "127.0.0.1:8080", "https://127.0.0.1:8443/ui/"},
		{"0.0.0.0:8443", "silo-0.example:8080", "https://silo-0.example:8443/ui/"},
		{"[::]:8443", "localhost", "https://localhost:8443/ui/"},
		{":8443", "[::1]:8080", "https://[::1]:8443/ui/"},
		{"", "x:1", ""},
	} {
		if got := certURL(c.addr, c.host); got != c.want {
			t.Errorf("certURL(%q, %q) = %q, want %q", c.addr, c.host, got, c.want)
		}
	}
}
