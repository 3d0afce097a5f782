package k8s_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// parseCert reads the first certificate of a PEM file.
func parseCert(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Errorf("%s: not a PEM certificate", what)
		return nil
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return nil
	}
	return c
}

// pool is a CA bundle from PEM.
func pool(t *testing.T, what string, data []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Errorf("%s: no PEM certificate", what)
	}
	return p
}

// verify checks that c is signed by roots for usage and, if name is not
// empty, names it (as the silos do for their peers: a DNS name or the
// common name; as an etcd client does for etcd: a DNS name).
func verify(t *testing.T, what string, c *x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, dnsName string) {
	t.Helper()
	if c == nil {
		return
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: dnsName}); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// checkSiloCredentials: the silos present a peer certificate of the peer
// CA, for server and client use, naming --peer-tls-name; the gossip key is
// base64 of 16, 24 or 32 bytes; the etcd client certificate goes with its
// key.
func checkSiloCredentials(t *testing.T, args siloArgs, files map[string][]byte) {
	t.Helper()
	for _, flag := range []string{"peer-tls-cert", "peer-tls-key", "peer-tls-ca", "peer-tls-name", "gossip-key-file", "etcd-ca", "etcd-cert", "etcd-key"} {
		if _, ok := args[flag]; !ok {
			t.Errorf("no --%s: the silos would not prove who they are to each other and to etcd", flag)
		}
	}
	if _, err := tls.X509KeyPair(files["peer-tls-cert"], files["peer-tls-key"]); files["peer-tls-cert"] != nil && err != nil {
		t.Errorf("--peer-tls-cert and --peer-tls-key: %v", err)
	}
	if peer := parseCert(t, "--peer-tls-cert", files["peer-tls-cert"]); peer != nil && files["peer-tls-ca"] != nil {
		roots := pool(t, "--peer-tls-ca", files["peer-tls-ca"])
		verify(t, "peer certificate as a server", peer, roots, x509.ExtKeyUsageServerAuth, "")
		verify(t, "peer certificate as a client", peer, roots, x509.ExtKeyUsageClientAuth, "")
		name := args["peer-tls-name"]
		named := peer.Subject.CommonName == name
		for _, n := range peer.DNSNames {
			named = named || n == name
		}
		if !named {
			t.Errorf("the peer certificate names %v and %q, not --peer-tls-name=%s: the silos would refuse each other", peer.DNSNames, peer.Subject.CommonName, name)
		}
	}
	if k := files["gossip-key-file"]; k != nil {
		raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(k)))
		if n := len(raw); err != nil || (n != 16 && n != 24 && n != 32) {
			t.Errorf("--gossip-key-file: want base64 of 16, 24 or 32 bytes (%d bytes, %v)", len(raw), err)
		}
	}
	if files["etcd-cert"] != nil {
		if _, err := tls.X509KeyPair(files["etcd-cert"], files["etcd-key"]); err != nil {
			t.Errorf("--etcd-cert and --etcd-key: %v", err)
		}
	}
}

// checkEtcdTLS: the rendered etcd speaks TLS only, to clients and peers,
// and requires client certificates of its CA; the silos' client
// certificate is one, and the silos' --etcd-ca verifies etcd's certificate
// for the host names they dial; the probes use the plain health port.
func checkEtcdTLS(t *testing.T, o *objects, args siloArgs, files map[string][]byte) {
	t.Helper()
	sts, ok := o.statefulSets["etcd"]
	if !ok {
		return
	}
	c := container(t, sts, "etcd")
	ea := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			ea[k] = v
		}
	}
	for _, flag := range []string{"listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"} {
		for u := range strings.SplitSeq(ea[flag], ",") {
			if !strings.HasPrefix(u, "https://") {
				t.Errorf("etcd --%s=%s: want https only", flag, ea[flag])
			}
		}
	}
	for _, flag := range []string{"client-cert-auth", "peer-client-cert-auth"} {
		if ea[flag] != "true" {
			t.Errorf("etcd --%s=%q: want true, or any client with TLS may write", flag, ea[flag])
		}
	}
	file := func(flag string) []byte {
		if ea[flag] == "" {
			t.Errorf("etcd has no --%s", flag)
			return nil
		}
		data, _ := mountedFile(t, sts, c, o, variant{etcd: true}, ea[flag])
		return data
	}
	serverCert, serverKey, trusted := file("cert-file"), file("key-file"), file("trusted-ca-file")
	peerCert, peerKey, peerTrusted := file("peer-cert-file"), file("peer-key-file"), file("peer-trusted-ca-file")
	for _, pair := range [][2][]byte{{serverCert, serverKey}, {peerCert, peerKey}} {
		if pair[0] != nil {
			if _, err := tls.X509KeyPair(pair[0], pair[1]); err != nil {
				t.Errorf("etcd certificate and key: %v", err)
			}
		}
	}
	if trusted != nil {
		verify(t, "the silos' etcd client certificate", parseCert(t, "--etcd-cert", files["etcd-cert"]), pool(t, "etcd --trusted-ca-file", trusted), x509.ExtKeyUsageClientAuth, "")
	}
	if server := parseCert(t, "etcd --cert-file", serverCert); server != nil && files["etcd-ca"] != nil {
		for ep := range strings.SplitSeq(args["etcd-endpoints"], ",") {
			if u, err := url.Parse(ep); err == nil {
				verify(t, "etcd's certificate, dialled at "+u.Hostname(), server, pool(t, "--etcd-ca", files["etcd-ca"]), x509.ExtKeyUsageServerAuth, u.Hostname())
			}
		}
	}
	if peer := parseCert(t, "etcd --peer-cert-file", peerCert); peer != nil && peerTrusted != nil {
		for m := range strings.SplitSeq(ea["initial-cluster"], ",") {
			_, raw, _ := strings.Cut(m, "=")
			if u, err := url.Parse(raw); err == nil {
				verify(t, "etcd's peer certificate at "+u.Hostname(), peer, pool(t, "etcd --peer-trusted-ca-file", peerTrusted), x509.ExtKeyUsageServerAuth, u.Hostname())
				verify(t, "etcd's peer certificate as a client", peer, pool(t, "etcd --peer-trusted-ca-file", peerTrusted), x509.ExtKeyUsageClientAuth, "")
			}
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		if cp, ok := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); ok && cp.Name == "client" {
			t.Errorf("an etcd probe uses the client port, which requires a client certificate the kubelet lacks")
		}
	}
}

// TestCertsMustBeMade: the repository ships no certificate, key or gossip
// key (and git ignores what make-certs.sh writes), so the kustomizations do
// not build until make-certs.sh has run; run again, it keeps its CAs and
// the gossip key and issues new certificates of the same CAs.
func TestCertsMustBeMade(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := git("ls-files", "--", "deploy/k8s")
	if err != nil {
		t.Fatalf("git ls-files: %v\n%s", err, out)
	}
	if !strings.Contains(out, "deploy/k8s/make-certs.sh") {
		t.Fatalf("git ls-files lists no deploy/k8s/make-certs.sh:\n%s", out)
	}
	for f := range strings.FieldsSeq(out) {
		if ext := filepath.Ext(f); ext == ".key" || ext == ".crt" || strings.HasPrefix(f, "deploy/k8s/base/tls/") {
			t.Errorf("the repository holds %s: certificates and keys are made by make-certs.sh, never shipped", f)
		}
	}
	for _, f := range []string{"deploy/k8s/base/tls/peer.key", "deploy/k8s/base/tls/ca/peer-ca.key", "deploy/k8s/base/tls/gossip.key"} {
		if out, err := git("check-ignore", "-q", f); err != nil {
			t.Errorf("git does not ignore %s: %v %s", f, err, out)
		}
	}

	tr := newTree(t, "alice")
	tlsDir := filepath.Join(tr.dir, "base", "tls")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(tlsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if info, err := os.Stat(filepath.Join(tlsDir, "ca", "peer-ca.key")); err != nil || info.Mode().Perm()&0o077 != 0 {
		t.Errorf("the peer CA's key: %v, %v; want it readable by its owner only", info.Mode(), err)
	}
	caBefore, gossipBefore, peerBefore := read("peer-ca.crt"), read("gossip.key"), read("peer.crt")
	if out, err := exec.Command(filepath.Join(tr.dir, "make-certs.sh")).CombinedOutput(); err != nil {
		t.Fatalf("make-certs.sh again: %v\n%s", err, out)
	}
	if !bytes.Equal(read("peer-ca.crt"), caBefore) || !bytes.Equal(read("gossip.key"), gossipBefore) {
		t.Errorf("make-certs.sh again replaced the CA or the gossip key: the running silos would refuse the new certificates")
	}
	if bytes.Equal(read("peer.crt"), peerBefore) {
		t.Errorf("make-certs.sh again did not issue a new peer certificate")
	}
	verify(t, "the re-issued peer certificate", parseCert(t, "peer.crt", read("peer.crt")), pool(t, "peer-ca.crt", caBefore), x509.ExtKeyUsageClientAuth, "")
	if out, err := exec.Command(filepath.Join(tr.dir, "make-certs.sh"), "-n", "Bad_NS").CombinedOutput(); err == nil {
		t.Errorf("make-certs.sh took a namespace that is not a DNS label:\n%s", out)
	}

	// Without them, no kustomization builds, and the error names tls/.
	if err := os.RemoveAll(tlsDir); err != nil {
		t.Fatal(err)
	}
	for dir := range variants {
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		_, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(tr.dir, dir))
		if err == nil || !strings.Contains(err.Error(), "tls/") {
			t.Errorf("%s builds without make-certs.sh's files (error: %v), want an error naming tls/", dir, err)
		}
	}
	if _, err := os.Stat(tlsDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}
