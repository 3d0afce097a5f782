package mcp_test

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
	"slices"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// With the gateway's certificate flags, MCP serves HTTPS, and a client
// certificate's common name is the caller; without one, no connection.
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
	issue := func(name, cn string, ips []net.IP, usage x509.ExtKeyUsage) (string, string) {
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
	session := func(cert, key string) (*mcpsdk.ClientSession, error) {
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
		c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "tls-test", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{
			Endpoint: "https://" + s.MCPAddr() + "/mcp", HTTPClient: &http.Client{Transport: tr}, DisableStandaloneSSE: true, MaxRetries: -1,
		}, nil)
		if err == nil {
			t.Cleanup(func() { cs.Close() })
		}
		return cs, err
	}
	carol, err := session(carolCert, carolKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := carol.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "carol:c1"}})
	if err != nil || !slices.Equal(texts(res), []string{"1"}) {
		t.Fatalf("carol counts on her agent over TLS: %+v %v", res, err)
	}
	if _, err := carol.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "dave:c1"}}); err == nil {
		t.Fatal("carol counted on dave's agent")
	}
	if _, err := session("", ""); err == nil {
		t.Fatal("a client without a certificate connected")
	}
}
