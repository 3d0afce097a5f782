package cluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster/dashboard"
)

// mountDashboard serves the dashboard (package dashboard) under /ui on the
// HTTP port. It reads through a connection to the silo's own gateway, as
// the principal who logged in. Without authentication it serves only on a
// loopback HTTP address (or with Insecure): nothing is readable
// anonymously from elsewhere. Its sampler and connection end when the
// silo stops.
func (s *Silo) mountDashboard(mux *http.ServeMux) error {
	authn, err := auth.New(s.sub.gateway.Auth)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if !authn.Enabled() && !s.cfg.Insecure && !auth.Loopback(s.httpLis.Addr().String()) {
		mux.HandleFunc("/ui/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the dashboard needs authentication (--auth-file) on a non-loopback HTTP address", http.StatusForbidden)
		})
		return nil
	}
	creds, err := s.dashboardCreds()
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	target := s.gwLis.Addr().String()
	if h, port, err := net.SplitHostPort(target); err == nil {
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			target = net.JoinHostPort("127.0.0.1", port)
		}
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	cfg := dashboard.Config{
		Silo:    s.cfg.Name,
		Conn:    conn,
		Auth:    authn,
		ACL:     s.acl,
		Metrics: s.cfg.Metrics,
		Etcd:    s.etcd.Client(),
		Prefix:  s.etcd.Prefix(),
		Logger:  s.logger,
	}
	if s.a2a != nil {
		cfg.A2A = s.a2a.Handler()
	}
	if s.mcp != nil {
		cfg.MCP, cfg.MCPAddr = s.mcp, s.MCPAddr()
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		conn.Close()
		return err
	}
	mux.Handle("/ui", d.Handler())
	mux.Handle("/ui/", d.Handler())
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		<-s.stopc
		d.Close()
		conn.Close()
	}()
	return nil
}

// dashboardCreds are the credentials of the dashboard's connection to its
// own gateway: plaintext, or TLS trusting exactly the gateway's
// certificate.
func (s *Silo) dashboardCreds() (credentials.TransportCredentials, error) {
	a := s.sub.gateway.Auth
	if a.TLSCert == "" {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
	if err != nil {
		return nil, err
	}
	own := cert.Certificate[0]
	return credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12,
		// The name does not matter: the peer must show this very
		// certificate, which VerifyPeerCertificate checks.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], own) {
				return errors.New("dashboard: the gateway did not show its own certificate")
			}
			return nil
		},
	}), nil
}
