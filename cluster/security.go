package cluster

import (
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/certs"
)

// Silos prove who they are to each other: the peer port serves mutual TLS
// (PeerTLS) and gossip is encrypted with a key ring (GossipKeyFile). A
// message on the peer port is an agent's message whose sender, call chain
// and principal the sending silo vouches for, so a peer port open to
// others than the cluster's silos would let them act as any agent and any
// principal; gossip open to others would let them join the group and
// declare silos dead. So a silo whose peer or gossip address is not a
// loopback address refuses to start without them, unless Insecure.

// PeerTLSConfig configures mutual TLS between silos. Each silo presents
// its certificate, signed by CA, and takes from its peers only
// certificates signed by CA that name the silo they say they are (as a DNS
// name or common name), or Name. Certificate, key and CA are read again
// when their files change: a rotation needs no restart.
type PeerTLSConfig struct {
	// CertFile and KeyFile are the silo's certificate and key, PEM
	// (--peer-tls-cert, --peer-tls-key). The certificate is used as both
	// server and client, so it needs both extended key usages.
	CertFile, KeyFile string
	// CAFile holds the CA certificates that sign the silos' (--peer-tls-ca).
	CAFile string
	// Name, if set, is a name the silos' certificates may carry instead of
	// each silo's own (--peer-tls-name): for one certificate shared by all
	// the silos of a cluster, as a Kubernetes Secret mounted by every pod is.
	Name string
}

// Enabled reports whether any file is set.
func (c PeerTLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// open reads the files, or returns nil if TLS is off.
func (c PeerTLSConfig) open() (*certs.Reloader, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return nil, errs.New(codes.InvalidArgument, "cluster: peer TLS needs a certificate, its key and a CA (--peer-tls-cert, --peer-tls-key, --peer-tls-ca)")
	}
	r, err := certs.Open(certs.Files{Cert: c.CertFile, Key: c.KeyFile, CA: c.CAFile})
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "cluster: peer TLS: %w", err)
	}
	return r, nil
}

// checkExposure refuses a peer or gossip address that others than the
// cluster's silos may reach, without mutual TLS or a gossip key, unless
// cfg.Insecure.
func checkExposure(cfg *SiloConfig) error {
	if cfg.Insecure {
		return nil
	}
	if !cfg.PeerTLS.Enabled() && !auth.Loopback(cfg.PeerAddr) {
		return errs.New(codes.InvalidArgument, "cluster: peer address %q is not loopback: without mutual TLS (--peer-tls-cert, --peer-tls-key, --peer-tls-ca) anyone who reaches it can act as any agent; give them, or --insecure", cfg.PeerAddr)
	}
	if len(cfg.Etcd.Endpoints) == 0 && cfg.Etcd.EmbeddedAddr != "" && !auth.Loopback(cfg.Etcd.EmbeddedAddr) {
		return errs.New(codes.InvalidArgument, "cluster: embedded etcd address %q is not loopback: the embedded etcd has neither TLS nor users, so anyone who reaches it can rewrite the cluster's membership, ACL and reminders; run an etcd of your own with TLS (--etcd-endpoints, --etcd-ca, ...), or give --insecure", cfg.Etcd.EmbeddedAddr)
	}
	if cfg.GossipKeyFile == "" && !auth.Loopback(cfg.GossipAddr) {
		return errs.New(codes.InvalidArgument, "cluster: gossip address %q is not loopback: without a gossip key (--gossip-key-file) anyone who reaches it can join the gossip group and declare silos dead; give one, or --insecure", cfg.GossipAddr)
	}
	return nil
}

// describeSecurity names, for the log, how the silo's ports are secured.
func describeSecurity(cfg *SiloConfig) []any {
	return []any{"peer_tls", cfg.PeerTLS.Enabled(), "gossip_encrypted", cfg.GossipKeyFile != "", "trusted_agents", cfg.TrustedAgents, "insecure", cfg.Insecure}
}
