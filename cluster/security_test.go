package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/certs"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// peerAddr is the peer address of silo name in s's view.
func peerAddr(t *testing.T, s *Silo, name string) string {
	t.Helper()
	mi, ok := s.members.View().Member(name)
	if !ok {
		t.Fatalf("%s is not in the view", name)
	}
	return mi.PeerAddr
}

// peerStream opens a Peer stream to addr with creds, sends a hello as
// silo, and returns what the other end answered: its first batch, or the
// stream's error.
func peerStream(ctx context.Context, addr string, creds credentials.TransportCredentials, silo string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := agentsilov1.NewPeerClient(conn).Stream(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&agentsilov1.PeerBatch{Hello: &agentsilov1.PeerHello{Silo: silo}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	// An accepted stream answers with its hello, and then waits for
	// envelopes; a refused one ends.
	if _, err := stream.Recv(); err != nil {
		return err
	}
	// Send a message and see whether the stream stays.
	err = stream.Send(&agentsilov1.PeerBatch{Envelopes: []*agentsilov1.PeerEnvelope{{
		Kind: agentsilov1.Kind_KIND_REQUEST, CallId: 1,
		Message: &agentsilov1.AgentMessage{To: "Probe:test:x", From: "Probe:test:y", Message: "hi", Id: "1", CallChainId: "1"},
	}}})
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	b, err := stream.Recv()
	if err != nil {
		return err
	}
	if len(b.Envelopes) != 1 || b.Envelopes[0].GetError() != nil {
		return fmt.Errorf("reply %v", b)
	}
	return nil
}

// peerHello opens a Peer stream to addr with creds, sends a hello as silo,
// and returns the hello the other end answered with, or the stream's error.
func peerHello(ctx context.Context, addr string, creds credentials.TransportCredentials, silo string) (*agentsilov1.PeerHello, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := agentsilov1.NewPeerClient(conn).Stream(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&agentsilov1.PeerBatch{Hello: &agentsilov1.PeerHello{Silo: silo}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	b, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	return b.GetHello(), nil
}

// TestPeerPortMutualTLS is the peer-port attack: with mutual TLS on, silos
// form a cluster and forward calls to each other, but a plain gRPC client
// without a certificate is refused by the peer port, and so is one with a
// certificate of another CA, and one whose certificate names a silo other
// than the one its hello claims to be. Before, the first of them could
// call any agent as anyone.
func TestPeerPortMutualTLS(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "peer CA")
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := func(name string) PeerTLSConfig {
		cert, key, err := ca.Issue(name, []string{name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return PeerTLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.CertFile}
	}
	c := newTestCluster(t)
	defer c.close()
	var silos []*Silo
	for _, name := range []string{"s1", "s2"} {
		silos = append(silos, c.startWith(name, func(cfg *SiloConfig, _ *grain.Registry) { cfg.PeerTLS = peerTLS(name) }))
	}
	c.waitView("s1", "s2")
	// Calls cross: every address answers from its owner, from either silo.
	names := []string{"s1", "s2"}
	crossed := 0
	for i := range 20 {
		to := fmt.Sprintf("Probe:test:a%d", i)
		for _, s := range silos {
			got, err := ask(t.Context(), s, to)
			if err != nil || got != Owner(to, names) {
				t.Fatalf("ask %s from %s: %q, %v", to, s.cfg.Name, got, err)
			}
			if got != s.cfg.Name {
				crossed++
			}
		}
	}
	if crossed == 0 {
		t.Fatal("no call crossed silos")
	}

	addr := peerAddr(t, silos[0], "s1")
	ctx := t.Context()
	// A plain client: refused at the handshake.
	if err := peerStream(ctx, addr, insecure.NewCredentials(), "s2"); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext client on the peer port: %v, want refused (Unavailable)", err)
	}
	// TLS without a client certificate.
	if err := peerStream(ctx, addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}), "s2"); err == nil {
		t.Fatal("a TLS client without a certificate was served")
	}
	// A certificate of another CA.
	other, err := certstest.NewCA(t.TempDir(), "other CA")
	if err != nil {
		t.Fatal(err)
	}
	open := func(ca *certstest.CA, name string) credentials.TransportCredentials {
		cert, key, err := ca.Issue(name, []string{name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := certs.Open(certs.Files{Cert: cert, Key: key, CA: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(r.ClientConfig())
	}
	if err := peerStream(ctx, addr, open(other, "s2"), "s2"); err == nil {
		t.Fatal("a certificate of another CA was served")
	}
	// The cluster's CA, but the certificate of s9 claiming to be s2.
	if err := peerStream(ctx, addr, open(ca, "s9"), "s2"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a certificate of s9 saying it is s2: %v, want Unauthenticated", err)
	}
	// The cluster's CA, a certificate that names no silo: refused before
	// the silo says who it is.
	if h, err := peerHello(ctx, addr, open(ca, "client"), "s2"); h != nil || status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a certificate naming no silo saying it is s2: hello %v, %v; want no hello, Unauthenticated", h, err)
	}
	if h, err := peerHello(ctx, addr, open(ca, "s2"), "s2"); h.GetSilo() != "s1" || err != nil {
		t.Fatalf("the certificate of s2: hello %v, %v; want s1's", h, err)
	}
	// What the cluster's CA signs for the name it claims is a silo.
	if err := peerStream(ctx, addr, open(ca, "s3"), "s3"); err != nil {
		t.Fatalf("a certificate of s3 saying it is s3: %v", err)
	}
	c.l.check(t)
}

// TestExposedPortsNeedSecurity: a silo whose peer or gossip address is not
// loopback does not start without mutual TLS and a gossip key, unless
// Insecure.
func TestExposedPortsNeedSecurity(t *testing.T) {
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "peer CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("s1", []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte("# the cluster's gossip key\nAAECAwQFBgcICQoLDA0ODw==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOn := PeerTLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.CertFile}
	for _, c := range []struct {
		name          string
		peer, gossip  string
		tls           PeerTLSConfig
		gossipKey     string
		insecure      bool
		refused, want string
	}{
		{"loopback", "127.0.0.1:0", "127.0.0.1:0", PeerTLSConfig{}, "", false, "", ""},
		{"peer exposed", "0.0.0.0:0", "127.0.0.1:0", PeerTLSConfig{}, "", false, "peer address", ""},
		{"gossip exposed", "127.0.0.1:0", "0.0.0.0:0", PeerTLSConfig{}, "", false, "gossip address", ""},
		{"both secured", "0.0.0.0:0", "0.0.0.0:0", tlsOn, keyFile, false, "", ""},
		{"peer TLS, gossip not", "0.0.0.0:0", "0.0.0.0:0", tlsOn, "", false, "gossip address", ""},
		{"insecure", "0.0.0.0:0", "0.0.0.0:0", PeerTLSConfig{}, "", true, "", ""},
		{"half TLS", "127.0.0.1:0", "127.0.0.1:0", PeerTLSConfig{CertFile: cert}, "", false, "", "needs a certificate, its key and a CA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultSiloConfig()
			cfg.Name = "s1"
			cfg.PeerAddr, cfg.GossipAddr = c.peer, c.gossip
			cfg.PeerTLS, cfg.GossipKeyFile, cfg.Insecure = c.tls, c.gossipKey, c.insecure
			_, err := NewSilo(cfg, newTestRegistry(t))
			if c.refused == "" {
				if err != nil {
					t.Fatalf("NewSilo: %v", err)
				}
			} else if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.refused) {
				t.Fatalf("NewSilo: %v, want InvalidArgument about the %s", err, c.refused)
			}
			if c.want != "" {
				if _, err := cfg.PeerTLS.open(); err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("peer TLS: %v, want %q", err, c.want)
				}
			}
		})
	}
}

// TestGossipEncrypted: a silo with a gossip key does not let a memberlist
// without it join its gossip group.
func TestGossipEncrypted(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte("AAECAwQFBgcICQoLDA0ODwABAgMEBQYHCAkKCwwNDg8=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t)
	defer c.close()
	s1 := c.startWith("s1", func(cfg *SiloConfig, _ *grain.Registry) { cfg.GossipKeyFile = keyFile })
	mi, _ := s1.members.View().Member("s1")

	mc := memberlist.DefaultLANConfig()
	mc.Name = "stranger"
	mc.BindAddr, mc.BindPort = "127.0.0.1", 0
	mc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if n, err := ml.Join([]string{mi.GossipAddr}); err == nil || n != 0 {
		t.Fatalf("a gossip member without the key joined: %d, %v", n, err)
	}
}
