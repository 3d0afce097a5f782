package cluster

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The security flags reach the silo's config; the etcd password comes from
// SILO_ETCD_PASSWORD or --etcd-password-file (which wins), never a flag.
func TestSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SILO_ETCD_PASSWORD", "from-env")
	p := Program{Registry: newTestRegistry(t)}
	args := []string{
		"--peer-tls-cert", "p.crt", "--peer-tls-key", "p.key", "--peer-tls-ca", "ca.crt", "--peer-tls-name", "silo-peers",
		"--gossip-key-file", "g.key", "--trusted-agents",
		"--etcd-endpoints", "https://etcd:2379", "--etcd-ca", "e.ca", "--etcd-cert", "e.crt", "--etcd-key", "e.key", "--etcd-user", "silo",
		"--max-sessions-per-principal", "7", "--max-calls-per-principal", "9", "--hello-timeout", "3s",
	}
	cfg, _, _, err := p.parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := PeerTLSConfig{CertFile: "p.crt", KeyFile: "p.key", CAFile: "ca.crt", Name: "silo-peers"}
	e := cfg.Etcd
	l := cfg.Gateway.Limits
	if cfg.PeerTLS != want || cfg.GossipKeyFile != "g.key" || !cfg.TrustedAgents ||
		e.CAFile != "e.ca" || e.CertFile != "e.crt" || e.KeyFile != "e.key" || e.Username != "silo" || e.Password != "from-env" ||
		l.MaxSessionsPerPrincipal != 7 || l.MaxCallsPerPrincipal != 9 || l.HelloTimeout.String() != "3s" {
		t.Fatalf("config %+v %+v %+v", cfg.PeerTLS, e, l)
	}
	cfg, _, _, err = p.parseFlags(append(args, "--etcd-password-file", pwFile), io.Discard)
	if err != nil || cfg.Etcd.Password != "from-file" {
		t.Fatalf("--etcd-password-file: %q, %v", cfg.Etcd.Password, err)
	}
}

// The topic flags reach the silo's config.
func TestTopicFlags(t *testing.T) {
	p := Program{Registry: newTestRegistry(t)}
	cfg, _, _, err := p.parseFlags([]string{"--topic-delivery-batch", "8", "--topic-max-attempts", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Topics.MaxDeliveryBatch != 8 || cfg.Topics.MaxAttempts != 3 {
		t.Fatalf("topics config %+v", cfg.Topics)
	}
}
