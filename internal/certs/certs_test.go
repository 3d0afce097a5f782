package certs

import (
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/certs/certstest"
)

// handshake runs a TLS handshake between a client and a server config over
// a pipe and returns the certificate each saw, or the first error.
func handshake(t *testing.T, client, server *tls.Config) (serverSaw, clientSaw string, err error) {
	t.Helper()
	// A TCP pair, not a pipe: an end that fails writes an alert nobody
	// may read.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errc := make(chan error, 1)
	srv := tls.Server(s, server)
	go func() { errc <- srv.Handshake() }()
	cli := tls.Client(c, client)
	cerr := cli.Handshake()
	if cerr != nil {
		c.Close() // the server's handshake ends too
	}
	serr := <-errc
	if cerr != nil {
		return "", "", cerr
	}
	if serr != nil {
		return "", "", serr
	}
	return srv.ConnectionState().PeerCertificates[0].Subject.CommonName, cli.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestMutualTLSAndReload: both ends verify the other's chain against the
// CA (and refuse another CA's certificate, or none); a certificate
// replaced on disk is presented from the next handshake on.
func TestMutualTLSAndReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	open := func(cn string) *Reloader {
		cert, key, err := ca.Issue(cn, []string{cn}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(Files{Cert: cert, Key: key, CA: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		r.minCheck = 0
		return r
	}
	a, b := open("s1"), open("s2")
	if s, c, err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil || s != "s1" || c != "s2" {
		t.Fatalf("handshake: server saw %q, client saw %q, %v", s, c, err)
	}

	// Another CA's certificate is refused, either way.
	otherDir := t.TempDir()
	other, err := certstest.NewCA(otherDir, "other CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.Issue("s1", []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := Open(Files{Cert: cert, Key: key, CA: other.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := handshake(t, stranger.ClientConfig(), b.ServerConfig()); err == nil {
		t.Fatal("the server took a certificate of another CA")
	}
	if _, _, err := handshake(t, a.ClientConfig(), stranger.ServerConfig()); err == nil {
		t.Fatal("the client took a server certificate of another CA")
	}
	// No client certificate at all.
	if _, _, err := handshake(t, &tls.Config{InsecureSkipVerify: true}, b.ServerConfig()); err == nil {
		t.Fatal("the server took a client without a certificate")
	}

	// Rotation: s2's files now hold a certificate named s2-new; the next
	// handshake presents it.
	if _, _, err := ca.Issue("s2", []string{"s2-new"}, nil); err != nil {
		t.Fatal(err)
	}
	// Make sure the modification time moves even on a coarse clock.
	later := time.Now().Add(time.Second)
	for _, f := range []string{b.files.Cert, b.files.Key} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil {
		t.Fatal(err)
	}
	leaf, err := b.Leaf()
	if err != nil || !NameOK(leaf, "s2-new") || NameOK(leaf, "s1") {
		t.Fatalf("after the rotation the certificate names %v (%v), want s2-new", Names(leaf), err)
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	// A broken file keeps the certificate in use.
	if err := os.WriteFile(b.files.Cert, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil {
		t.Fatalf("with a broken certificate file: %v", err)
	}
	if b.Err() == nil {
		t.Fatal("a failed reload is not reported")
	}
}
