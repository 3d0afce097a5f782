package a2a_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// With the gateway's certificate flags, A2A serves HTTPS, and a client
// certificate's common name is the caller.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(name string, cn string, ips []net.IP, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, IPAddresses: ips,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	caFile := write("ca.pem", "CERTIFICATE", caDER)
	srvCert, srvKey := issue("server", "silo", []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	carolCert, carolKey := issue("carol", "carol", nil, x509.ExtKeyUsageClientAuth)

	e := etcdtest.Start(t)
	s := startSilo(t, e, "tls", "/tls/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.TLSCert, c.Gateway.Auth.TLSKey, c.Gateway.Auth.TLSClientCA = srvCert, srvKey, caFile
	})
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	httpsClient := func(cert, key string) *http.Client {
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if cert != "" {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	carol := httpsClient(carolCert, carolKey)
	card, err := (&agentcard.Resolver{Client: carol}).Resolve(t.Context(), "https://"+s.A2AAddr()+"/a2a/Echo/carol/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := card.SecuritySchemes["mtls"]; !ok || card.SupportedInterfaces[0].URL != "https://"+s.A2AAddr()+"/a2a/Echo/carol/x" {
		t.Fatalf("card: %+v", card)
	}
	for _, tr := range []spec.TransportProtocol{spec.TransportProtocolJSONRPC, spec.TransportProtocolHTTPJSON} {
		c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(carol), a2aclient.WithRESTTransport(carol),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{tr}}))
		if err != nil {
			t.Fatal(err)
		}
		task := taskOf(t)(c.SendMessage(t.Context(), text("over TLS")))
		if artifactText(task) != "over TLS" {
			t.Fatalf("%s: %q", tr, artifactText(task))
		}
		c.Destroy()
	}
	// The gRPC binding, on the same port over the same TLS (h2 by ALPN),
	// with the same certificate.
	cc, err := tls.LoadX509KeyPair(carolCert, carolKey)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := a2aclient.NewFromCard(t.Context(), card,
		a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cc}, MinVersion: tls.VersionTLS12}))),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocolGRPC}}))
	if err != nil {
		t.Fatal(err)
	}
	if task := taskOf(t)(gc.SendMessage(t.Context(), text("gRPC over TLS"))); artifactText(task) != "gRPC over TLS" {
		t.Fatalf("gRPC: %q", artifactText(task))
	}
	gc.Destroy()
	// Without a certificate, no connection.
	if _, err := (&agentcard.Resolver{Client: httpsClient("", "")}).Resolve(t.Context(), "https://"+s.A2AAddr()+"/a2a/Echo/carol/x"); err == nil {
		t.Fatal("a client without a certificate got the card")
	}
}
