package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// testKeys: alice and bob, and root in group admins.
var testKeys = []auth.APIKey{
	{SHA256: keyHash("alice-key"), Principal: "alice"},
	{SHA256: keyHash("bob-key"), Principal: "bob"},
	{SHA256: keyHash("root-key"), Principal: "root", Groups: []string{"admins"}},
}

// startAuthority returns an ACL authority on a MemStore holding d.
func startAuthority(t *testing.T, d acl.Document) *acl.Authority {
	t.Helper()
	s := acl.NewMemStore()
	if _, err := s.Put(t.Context(), d, 0); err != nil {
		t.Fatal(err)
	}
	a, err := acl.NewAuthority(acl.Config{Store: s, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, protocol.APIKeyHeader, key)
}

func askReq(to, text string) *agentsilov1.AskRequest {
	return &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: to, Message: text}}
}

func TestAPIKeysAndTheClientGrain(t *testing.T) {
	a := startAuthority(t, acl.Document{})
	e := startGateway(t, func(c *Config) {
		c.Auth.Keys = testKeys
		c.ACL = a
		c.Addr = "" // loopback is not required with authentication
	})
	ctx := t.Context()
	alice, bob, root := withKey(ctx, "alice-key"), withKey(ctx, "bob-key"), withKey(ctx, "root-key")

	// No key, a wrong key: Unauthenticated, on unary calls and sessions.
	for _, c := range []context.Context{ctx, withKey(ctx, "nope")} {
		if _, err := e.cli.Ask(c, askReq("Echo:x", "hi")); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Ask without a valid key: %v", err)
		}
		s, err := e.cli.Session(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Session without a valid key: %v", err)
		}
	}
	// The health service and reflection need no key (probes, grpcurl);
	// reflection lists the admin service.
	if _, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health: %v", err)
	}
	refl, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lsr, err := refl.Recv()
	if err != nil {
		t.Fatalf("reflection without a key: %v", err)
	}
	refl.CloseSend()
	var services []string
	for _, svc := range lsr.GetListServicesResponse().GetService() {
		services = append(services, svc.Name)
	}
	if !strings.Contains(strings.Join(services, " "), agentsilov1.AclAdmin_ServiceDesc.ServiceName) {
		t.Fatalf("reflection lists %v, not the admin service", services)
	}

	// Own agents: allowed, relative or canonical; from is the caller's.
	r, err := e.cli.Ask(alice, askReq("Echo:x", "hi"))
	if err != nil || r.Message.Message != "hi" || r.Message.From != "Echo:alice:x" {
		t.Fatalf("own agent: %v, %v", r, err)
	}
	// A declared principal must be the proven one.
	if _, err := e.cli.Ask(metadata.AppendToOutgoingContext(alice, protocol.PrincipalHeader, "bob"), askReq("Echo:x", "hi")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's key declaring bob: %v", err)
	}
	if _, err := e.cli.Ask(bob, askReq("Echo:y", "hi")); err != nil {
		t.Fatal(err)
	}

	// Another owner's agent: PermissionDenied naming the permission.
	_, err = e.cli.Ask(alice, askReq("Echo:bob:y", "hi"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Message") || strings.Contains(err.Error(), "->") {
		t.Fatalf("other owner's agent: %v", err)
	}
	if _, err := e.cli.Send(alice, &agentsilov1.SendRequest{Message: &agentsilov1.AgentMessage{To: "Echo:bob:y", Kind: agentsilov1.Kind_KIND_EVENT}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("event to another owner's agent: %v", err)
	}
	if _, err := e.cli.CreateAgent(alice, &agentsilov1.CreateAgentRequest{Address: "Echo:bob:c"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Configure") {
		t.Fatalf("CreateAgent of another owner's agent: %v", err)
	}
	if _, err := e.cli.ListReminders(alice, &agentsilov1.ListRemindersRequest{Agent: "Echo:bob:y"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Read") {
		t.Fatalf("reminders of another owner's agent: %v", err)
	}
	if got := listed(t, e, alice); got != "Echo:alice:x" {
		t.Fatalf("alice lists %q", got)
	}
	// The seed rule (no rules set): system agents take messages from all.
	if _, err := e.cli.Ask(alice, askReq("Echo:system:s", "hi")); err != nil {
		t.Fatalf("system agent under the seed rule: %v", err)
	}

	// Sessions: the principal is the key's; checks and from as above.
	s := openWith(t, e, alice, &agentsilov1.Hello{})
	if s.welcome.Principal != "alice" || !strings.HasPrefix(s.welcome.Address, "Session:alice:") {
		t.Fatalf("welcome %v", s.welcome)
	}
	wantCode(t, s.ask("Echo:bob:y", "hi"), codes.PermissionDenied)
	id := s.call(&agentsilov1.AgentMessage{To: "Who:w", From: "Echo:bob:y", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	res, _ := s.result(id)
	wantText(t, res, s.welcome.Address) // a forged from is ignored
	forged := e.dialWith(t, alice, &agentsilov1.Hello{Principal: "bob"})
	if _, err := forged.stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's key declaring bob on a session: %v", err)
	}

	// Admin: alice may not change rules; root (group admins) may.
	adm := agentsilov1.NewAclAdminClient(e.conn)
	rule := &agentsilov1.AclRule{OwnerPattern: "bob", AgentPattern: "*", CallerPattern: "alice", Permission: "Message,Read"}
	if _, err := adm.AddRule(alice, &agentsilov1.AddRuleRequest{Rule: rule}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Admin") {
		t.Fatalf("AddRule by alice: %v", err)
	}
	if _, err := adm.ListRules(alice, &agentsilov1.ListRulesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ListRules by alice: %v", err)
	}
	added, err := adm.AddRule(root, &agentsilov1.AddRuleRequest{Rule: rule})
	if err != nil || added.Rule.Id == 0 || added.Position != 1 {
		t.Fatalf("AddRule by root: %v, %v", added, err)
	}
	// In force on this gateway when AddRule returns.
	if _, err := e.cli.Ask(alice, askReq("Echo:bob:y", "hi")); err != nil {
		t.Fatalf("after the rule: %v", err)
	}
	if got := listed(t, e, alice); got != "Echo:alice:x,Echo:bob:y" {
		t.Fatalf("alice lists %q after the rule", got)
	}
	wantText(t, s.ask("Echo:bob:y", "again"), "again")
	chk, err := adm.Check(root, &agentsilov1.CheckRequest{Caller: "alice", Agent: "bob:y", Permission: "Configure"})
	if err != nil || chk.Allowed || chk.Reason != "rule" || chk.Rule.GetId() != added.Rule.Id || chk.Granted != "Message,Read" {
		t.Fatalf("Check: %v, %v", chk, err)
	}
	// The seed rule no longer applies beside a rule of one's own.
	if _, err := e.cli.Ask(alice, askReq("Echo:system:s", "hi")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("system agent beside rules: %v", err)
	}
	// A stale revision is refused; removal denies again.
	if _, err := adm.RemoveRule(root, &agentsilov1.RemoveRuleRequest{Id: added.Rule.Id, Revision: added.Revision - 1}); status.Code(err) != codes.Aborted {
		t.Fatalf("RemoveRule at a stale revision: %v", err)
	}
	if _, err := adm.RemoveRule(root, &agentsilov1.RemoveRuleRequest{Id: added.Rule.Id, Revision: added.Revision}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Ask(alice, askReq("Echo:bob:y", "hi")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after removal: %v", err)
	}
	// Groups from the ACL count as those of keys do.
	if _, err := adm.SetGroup(root, &agentsilov1.SetGroupRequest{Group: &agentsilov1.AclGroup{Name: "admins", Members: []string{"alice"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ListRules(alice, &agentsilov1.ListRulesRequest{}); err != nil {
		t.Fatalf("ListRules by alice in group admins: %v", err)
	}
}

// listed returns the addresses ctx's caller may list, comma-separated.
func listed(t *testing.T, e *testEnv, ctx context.Context) string {
	t.Helper()
	l, err := e.cli.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: "Echo"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range l.Agents {
		out = append(out, a.Address)
	}
	return strings.Join(sortStrings(out), ",")
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// dialWith is dial with ctx's metadata.
func (e *testEnv) dialWith(t *testing.T, md context.Context, hello *agentsilov1.Hello) *testSession {
	t.Helper()
	ctx, cancel := context.WithCancel(md)
	t.Cleanup(cancel)
	stream, err := e.cli.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return &testSession{t: t, stream: stream, cancel: cancel}
}

func openWith(t *testing.T, e *testEnv, md context.Context, hello *agentsilov1.Hello) *testSession {
	t.Helper()
	s := e.dialWith(t, md, hello)
	f, err := s.stream.Recv()
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if s.welcome = f.GetWelcome(); s.welcome == nil {
		t.Fatalf("first frame %v, want Welcome", f)
	}
	return s
}

// pki writes a CA, a server certificate for 127.0.0.1 and client
// certificates to dir, and returns their file names.
type pki struct {
	ca, serverCert, serverKey string
	caCert                    *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	dir                       string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
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
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caKey = key
	p.ca = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.serverCert, p.serverKey = p.issue(t, "server", pkix.Name{CommonName: "gateway"}, nil, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue writes a certificate signed by the CA and its key.
func (p *pki) issue(t *testing.T, name string, subject pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject, DNSNames: dns, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

func (p *pki) clientTLS(t *testing.T, cert, key string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	carolCert, carolKey := p.issue(t, "carol", pkix.Name{CommonName: "carol", OrganizationalUnit: []string{"admins"}}, nil, nil, x509.ExtKeyUsageClientAuth)
	daveCert, daveKey := p.issue(t, "dave", pkix.Name{}, []string{"dave.example"}, nil, x509.ExtKeyUsageClientAuth)
	badCert, badKey := p.issue(t, "bad", pkix.Name{CommonName: "no spaces allowed"}, nil, nil, x509.ExtKeyUsageClientAuth)
	a := startAuthority(t, acl.Document{})
	e := startGateway(t, func(c *Config) {
		c.Auth = auth.Config{TLSCert: p.serverCert, TLSKey: p.serverKey, TLSClientCA: p.ca}
		c.ACL = a
	})
	addr := e.conn.Target()
	dial := func(cert, key string) (*client.Client, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return client.Dial(ctx, []string{addr}, client.WithTLS(p.clientTLS(t, cert, key)))
	}

	// The principal is the subject's common name; its OUs are its groups.
	c, err := dial(carolCert, carolKey)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Principal() != "carol" {
		t.Fatalf("principal %q, want carol", c.Principal())
	}
	if r, err := c.Ask(t.Context(), "Who:w", nil); err != nil || !strings.HasPrefix(r.Message, "Session:carol:") {
		t.Fatalf("Ask: %v, %v", r, err)
	}
	if _, err := c.ACL().Rules(t.Context()); err != nil {
		t.Fatalf("ACL().Rules as carol (OU admins): %v", err)
	}
	// Without a common name: the first DNS name.
	d, err := dial(daveCert, daveKey)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Principal() != "dave.example" {
		t.Fatalf("principal %q, want dave.example", d.Principal())
	}
	if _, err := d.ACL().Rules(t.Context()); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ACL().Rules as dave: %v", err)
	}
	if _, err := d.Ask(t.Context(), "Echo:carol:x", nil); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("dave to carol's agent: %v", err)
	}
	// A name that is no principal: Unauthenticated.
	if _, err := dial(badCert, badKey); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("certificate without a usable name: %v", err)
	}
	// No client certificate: the handshake fails.
	if c, err := dial("", ""); err == nil {
		c.Close()
		t.Fatal("dial without a client certificate succeeded")
	}
	// Plaintext: refused too.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := agentsilov1.NewGatewayClient(conn).Ask(t.Context(), askReq("Echo:x", "hi")); err == nil {
		t.Fatal("plaintext call succeeded")
	}
}

// TestAuthConfig: a non-loopback gateway needs authentication or Insecure.
func TestAuthConfig(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`{"keys": [{"sha256": "`+keyHash("k")+`", "principal": "alice", "groups": ["admins"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addr = "0.0.0.0:7070"
	if err := cfg.Validate(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("non-loopback gateway without authentication: %v, want InvalidArgument", err)
	}
	cfg.Auth.KeyFile = keys
	if err := cfg.Validate(); err != nil {
		t.Fatalf("non-loopback gateway with API keys: %v", err)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestProbesAreNotDenials: choosing what a caller sees (the agents it may
// list, whether a configuration's secrets are shown) asks the ACL without
// refusing anything, and counts no denial; a real refusal counts one.
func TestProbesAreNotDenials(t *testing.T) {
	var denials atomic.Int64
	s := acl.NewMemStore()
	a, err := acl.NewAuthority(acl.Config{Store: s, Logger: quietLogger(), OnDenied: func(acl.Permission) { denials.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	e := startGateway(t, func(c *Config) {
		c.Auth.Keys = testKeys
		c.ACL = a
		c.Addr = ""
	})
	alice := withKey(t.Context(), "alice-key")
	if _, err := e.cli.Ask(alice, askReq("Echo:mine", "hi")); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, e, alice); got != "Echo:alice:mine" {
		t.Fatalf("alice lists %q", got)
	}
	if _, err := e.cli.GetConfig(alice, &agentsilov1.GetConfigRequest{Agent: "Echo:bob:theirs"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("GetConfig of bob's agent by alice: %v, want PermissionDenied", err)
	}
	if n := denials.Load(); n != 1 {
		t.Fatalf("%d denials counted, want the 1 refusal", n)
	}
}
