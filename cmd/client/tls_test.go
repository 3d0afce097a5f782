package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// testCA issues certificates, written as PEM files to a test directory.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{t: t, cert: cert, key: key}
	ca.file = writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return ca
}

// issue writes a certificate for subject (and 127.0.0.1, for a server) and
// its key, and returns the two files.
func (ca *testCA) issue(name string, subject pkix.Name, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))),
		writeFile(t, name+"-key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
}

// The CLI's --tls-ca, --tls-cert and --tls-key against a gateway that
// authenticates client certificates.
func TestMutualTLSFlags(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue("server", pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue("carol", pkix.Name{CommonName: "carol"}, x509.ExtKeyUsageClientAuth)

	reg := grain.NewRegistry()
	who := func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
		r := m.Response()
		r.Message = m.From
		return r, nil
	}
	if err := reg.Register("Who", func(h grain.Host) (grain.Agent, error) { return agent{h, who}, nil }); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	rcfg := grain.DefaultConfig()
	rcfg.Logger = logger
	gcfg := gateway.DefaultConfig()
	gcfg.Addr = ""
	gcfg.Logger = logger
	gcfg.Auth = auth.Config{TLSCert: srvCert, TLSKey: srvKey, TLSClientCA: ca.file}
	sessions, err := gateway.NewSessions(gcfg, "")
	if err != nil {
		t.Fatal(err)
	}
	siloapi.Wire(&rcfg, siloapi.Wiring{Sessions: sessions})
	rt, err := grain.New(rcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gcfg, rt, sessions)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(lis) }()
	t.Cleanup(func() {
		gw.Stop()
		<-served
		rt.Close(context.Background())
	})
	addr := lis.Addr().String()

	out, errOut, code := runClient(t, addr, "--tls-ca", ca.file, "--tls-cert", cliCert, "--tls-key", cliKey, "ask", "Who:w", "hi")
	if code != 0 || !strings.HasPrefix(out, "Session:carol:") {
		t.Fatalf("ask with a client certificate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Without a certificate the TLS handshake fails; a bad flag is a usage error.
	if _, errOut, code := runClient(t, addr, "--tls-ca", ca.file, "ask", "Who:w", "hi"); code == 0 {
		t.Fatalf("ask without a client certificate: code 0, stderr %q", errOut)
	}
	if _, errOut, code := runClient(t, addr, "--tls-ca", ca.file, "--tls-cert", cliCert, "ask", "Who:w", "hi"); code != 2 || !strings.Contains(errOut, "go together") {
		t.Fatalf("--tls-cert without --tls-key: code %d, stderr %q", code, errOut)
	}
}
