package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/dashboard"
)

// siloDashboard is what serves the dashboard besides the HTTP port's mux:
// the in-process connection to the silo's own gateway, and the server of
// DashboardAddr's TLS listener.
type siloDashboard struct {
	made   bool
	inproc *auth.InProcess
	srv    *http.Server // nil without DashboardAddr
	addr   atomic.Value // string: the TLS listener's address, once listening
}

// mountDashboard serves the dashboard (package dashboard) under /ui on the
// HTTP port (mux) and, with DashboardAddr, over TLS there (serveDashboard
// listens). It reads and acts through an in-process connection to the
// silo's own gateway, as the principal who logged in: with an API key it
// passes the key on; for a client certificate, whose private key stays in
// the browser, it vouches for the certificate's principal, which the
// gateway takes on that connection alone (auth.Vouch). Without
// authentication it serves only on loopback addresses (or with Insecure):
// nothing is readable anonymously from elsewhere. Its sampler, connection
// and TLS listener end when the silo stops.
func (s *Silo) mountDashboard(mux *http.ServeMux) error {
	s.dash.made = true
	authn, err := auth.New(s.sub.gateway.Auth)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	tlsCfg := authn.TLSConfig()
	if s.cfg.DashboardAddr != "" {
		if tlsCfg == nil {
			return errs.New(codes.InvalidArgument, "dashboard: --dashboard-addr serves the dashboard over TLS with the gateway's certificate: give --tls-cert and --tls-key (and --tls-client-ca for client certificates)")
		}
		if !authn.Enabled() && !s.cfg.Insecure {
			if err := auth.CheckLoopback("dashboard", s.cfg.DashboardAddr); err != nil {
				return err
			}
		}
	}
	if mux != nil && !authn.Enabled() && !s.cfg.Insecure && !auth.Loopback(s.httpLis.Addr().String()) {
		mux.HandleFunc("/ui/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the dashboard needs authentication (--auth-file) on a non-loopback HTTP address", http.StatusForbidden)
		})
		mux = nil
	}
	if mux == nil && s.cfg.DashboardAddr == "" {
		return nil
	}
	s.dash.inproc = auth.NewInProcess()
	conn, err := grpc.NewClient("passthrough:///in-process", grpc.WithContextDialer(s.dash.inproc.DialContext),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	cfg := dashboard.Config{
		Silo:            s.cfg.Name,
		Conn:            conn,
		Auth:            authn,
		CertificateAddr: s.DashboardAddr,
		OIDCClientID:    s.cfg.OIDCClientID,
		ACL:             s.acl,
		Metrics:         s.cfg.Metrics,
		Etcd:            s.etcd.Client(),
		Prefix:          s.etcd.Prefix(),
		Logger:          s.logger,
	}
	if s.a2a != nil {
		cfg.A2A = s.a2a.Handler()
		cfg.A2ACertificates = s.sub.a2a.Auth.TLSClientCA == s.sub.gateway.Auth.TLSClientCA
	}
	if s.mcp != nil {
		cfg.MCP, cfg.MCPAddr = s.mcp, s.MCPAddr()
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		conn.Close()
		return err
	}
	if mux != nil {
		mux.Handle("/ui", d.Handler())
		mux.Handle("/ui/", d.Handler())
	}
	if s.cfg.DashboardAddr != "" {
		// The gateway's certificate; a client certificate is asked for
		// and verified against the gateway's client CA, but not required,
		// so a browser without one gets a page saying so (and the key
		// login, where keys are taken) instead of a failed handshake.
		if tlsCfg.ClientCAs != nil {
			tlsCfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
		dmux := http.NewServeMux()
		dmux.Handle("/ui", d.Handler())
		dmux.Handle("/ui/", d.Handler())
		dmux.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
		s.dash.srv = &http.Server{Handler: dmux, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second,
			// Failed handshakes (a certificate of another CA) among them.
			ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelInfo)}
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		<-s.stopc
		if s.dash.srv != nil {
			s.dash.srv.Close() // and its listener, if serving
		}
		d.Close()
		conn.Close()
		s.dash.inproc.Close()
	}()
	return nil
}

// serveDashboard starts serving the dashboard's in-process connection to
// the gateway and its TLS listener (DashboardAddr), if any. Without the
// HTTP port the dashboard is made here.
func (s *Silo) serveDashboard(ctx context.Context) error {
	if !s.dash.made && s.cfg.DashboardAddr != "" {
		if err := s.mountDashboard(nil); err != nil {
			return err
		}
	}
	if s.dash.inproc == nil {
		return nil
	}
	s.serve("gateway (in-process)", func() error { return s.gw.ServeInProcess(s.dash.inproc) })
	if s.dash.srv == nil {
		return nil
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", s.cfg.DashboardAddr)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	s.dash.addr.Store(lis.Addr().String())
	s.serve("dashboard", func() error {
		// Serve closes lis when it returns, also on a server already closed.
		if err := s.dash.srv.ServeTLS(lis, "", ""); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}

// DashboardAddr returns the address of the dashboard's TLS listener
// (SiloConfig.DashboardAddr), or "" if there is none.
func (s *Silo) DashboardAddr() string {
	a, _ := s.dash.addr.Load().(string)
	return a
}
