package k8s_test

// A real Kubernetes control plane for the tests: etcd, kube-apiserver and
// kube-controller-manager at the version deploy/k8s/controlplane/go.mod
// pins, built from the Go module proxy, and CoreDNS with its kubernetes
// plugin as the cluster's DNS. They run inside the node's network
// namespace; the test reaches the API server through it.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The node's addresses: its bridge, which the pods' default route and DNS
// point at, the pods' subnet, and the Services' ClusterIP range.
const (
	nodeIP      = "10.244.0.1"
	podPrefix   = "10.244.0."
	serviceCIDR = "10.96.0.0/24"
	apiPort     = "6443"
)

// controlPlaneBinaries are the programs deploy/k8s/controlplane builds.
type controlPlaneBinaries struct {
	apiserver, controllerManager, coredns, etcd string
}

// buildControlPlane builds the control plane's programs from the module
// deploy/k8s/controlplane (its go.mod pins every version) into a temporary
// directory. A warm Go build cache makes this a link of each.
func buildControlPlane(t *testing.T) controlPlaneBinaries {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager", "./coredns", "./etcd")
	cmd.Dir = "controlplane"
	// Static programs, as in their images: the pods run in a root of
	// their own holding nothing else.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the control plane (in deploy/k8s/controlplane): %v\n%s", err, out)
	}
	t.Logf("built the control plane in %v", time.Since(start).Round(time.Second))
	return controlPlaneBinaries{
		apiserver:         filepath.Join(dir, "kube-apiserver"),
		controllerManager: filepath.Join(dir, "kube-controller-manager"),
		coredns:           filepath.Join(dir, "coredns"),
		etcd:              filepath.Join(dir, "etcd"),
	}
}

// process is a program the test started; stop ends it.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProcess starts cmd, its output going to a file under dir.
func startProcess(t *testing.T, dir, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			p.dumpLog(t)
		}
	})
	return p
}

// stop sends SIGTERM, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// dumpLog logs the last part of the process's output.
func (p *process) dumpLog(t *testing.T) {
	data, _ := os.ReadFile(p.log)
	if len(data) > 8000 {
		data = data[len(data)-8000:]
	}
	t.Logf("--- %s (%s), last of its output:\n%s", p.name, p.log, data)
}

// controlPlane is the running control plane.
type controlPlane struct {
	dir        string
	kubeconfig string
	config     *rest.Config
	client     *kubernetes.Clientset
}

// startControlPlane starts etcd, the API server, the controller manager
// and CoreDNS in node, and waits for the API server to be ready.
func startControlPlane(t *testing.T, bins controlPlaneBinaries, node *netns) *controlPlane {
	t.Helper()
	dir := t.TempDir()
	cp := &controlPlane{dir: dir}
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// A CA, the API server's certificate from it, the service accounts'
	// signing key, and a token for the test and the controllers.
	caKey, caCert, caPEM := newCA(t)
	serverPEM, serverKeyPEM := issue(t, caKey, caCert, "kube-apiserver",
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(nodeIP), net.ParseIP("10.96.0.1")})
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		t.Fatal(err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	tokenBytes := make([]byte, 16)
	rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	caFile := write("ca.crt", caPEM)
	serverCert := write("apiserver.crt", serverPEM)
	serverKey := write("apiserver.key", serverKeyPEM)
	saKeyFile := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}))
	saPubFile := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}))
	tokens := write("tokens.csv", []byte(token+",admin,admin,system:masters\n"))
	server := "https://127.0.0.1:" + apiPort
	cp.kubeconfig = write("kubeconfig", fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
`, server, caFile, token))

	// etcd, on the node's loopback (the namespace is the test's alone, so
	// the usual ports are free).
	startProcess(t, dir, "etcd", node.command(bins.etcd,
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380", "--log-level=warn"))

	apiserver := startProcess(t, dir, "kube-apiserver", node.command(bins.apiserver,
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=127.0.0.1", "--secure-port="+apiPort, "--advertise-address="+nodeIP,
		"--tls-cert-file="+serverCert, "--tls-private-key-file="+serverKey, "--client-ca-file="+caFile,
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--token-auth-file="+tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPubFile, "--service-account-signing-key-file="+saKeyFile,
		"--service-cluster-ip-range="+serviceCIDR,
		"--profiling=false", "--v=1"))

	cp.config = &rest.Config{
		Host:            server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		Dial:            node.dial,
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
	if cp.client, err = kubernetes.NewForConfig(cp.config); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the API server to be ready", func() (bool, string) {
		if apiserver.exited() {
			t.Fatalf("kube-apiserver exited: %v", apiserver.err)
		}
		body, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(t.Context())
		return err == nil, fmt.Sprintf("%s %v", body, err)
	})

	// The controllers, all but the node lifecycle controller: the pod
	// runner stands in for a kubelet that sends no heartbeats.
	startProcess(t, dir, "kube-controller-manager", node.command(bins.controllerManager,
		"--kubeconfig="+cp.kubeconfig,
		"--controllers=*,-node-lifecycle-controller",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+saKeyFile, "--root-ca-file="+caFile,
		"--secure-port=0", "--leader-elect=false", "--profiling=false", "--v=1"))

	// CoreDNS answers for the cluster domain on the node's bridge address,
	// where the pods' resolv.conf points.
	corefile := write("Corefile", fmt.Appendf(nil, `cluster.local:53 {
    bind %s
    errors
    kubernetes cluster.local {
        kubeconfig %s
    }
}
`, nodeIP, cp.kubeconfig))
	startProcess(t, dir, "coredns", node.command(bins.coredns, "-conf", corefile))
	return cp
}

// waitFor polls cond until it holds, failing the test after timeout with
// what cond last said.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := poll(t.Context(), timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// poll polls cond until it holds or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return nil
		}
		last = msg
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %s", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func newCA(t *testing.T) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func issue(t *testing.T, caKey *ecdsa.PrivateKey, ca *x509.Certificate, cn string, dns []string, ips []net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
