package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

// SiloConfig configures a Silo. Start from DefaultSiloConfig.
type SiloConfig struct {
	// Name names the silo. Default: the host name.
	Name string
	// GatewayAddr is the client gateway's listen address. Default:
	// 127.0.0.1:7070; port 0 picks a free port (see Silo.GatewayAddr).
	GatewayAddr string
	// HTTPAddr serves /healthz and /readyz; empty turns it off. Default:
	// 127.0.0.1:8080.
	HTTPAddr string
	// Insecure lets the gateway listen on a non-loopback address without
	// authentication.
	Insecure bool
	// ShutdownTimeout bounds Close when the caller's context has no deadline.
	// Default: 30 s.
	ShutdownTimeout time.Duration
	// Etcd says where the silo keeps durable state: an external etcd, or an
	// embedded one in Etcd.DataDir (the default).
	Etcd EtcdConfig
	// MinReminderPeriod is the shortest reminder period accepted. Default:
	// 1 min.
	MinReminderPeriod time.Duration
	// ACLFile seeds the cluster's ACL in etcd when none is stored yet
	// (--acl-file): FabrCore's "Acl" JSON section. Empty: no seed.
	ACLFile string
	// Runtime configures the grain runtime; its Silo, Sessions, Configs and
	// Reminders fields are set by the silo.
	Runtime grain.Config
	// Gateway configures the gateway; its Silo and Addr fields are set by
	// the silo.
	Gateway GatewayConfig
	// Logger receives the silo's logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultSiloConfig returns the defaults described on SiloConfig's fields.
func DefaultSiloConfig() SiloConfig {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "silo"
	}
	return SiloConfig{
		Name:              name,
		GatewayAddr:       "127.0.0.1:7070",
		HTTPAddr:          "127.0.0.1:8080",
		ShutdownTimeout:   30 * time.Second,
		Etcd:              DefaultEtcdConfig(),
		MinReminderPeriod: time.Minute,
		Runtime:           grain.DefaultConfig(),
		Gateway:           DefaultGatewayConfig(),
	}
}

// Silo is one agentsilo server: the grain runtime, the client gateway in
// front of it (authenticating clients and enforcing the ACL), and its
// durable state in etcd (reminders, agent configurations, the ACL). Its lifecycle is NewSilo, Start, then Close; Err reports a
// failure while serving.
type Silo struct {
	cfg    SiloConfig
	reg    *grain.Registry
	logger *slog.Logger

	etcd      *Etcd
	acl       *acl.Authority
	reminders *reminders.Service
	rt        *grain.Runtime
	gw        *Gateway
	gwLis     net.Listener
	http      *http.Server
	httpLis   net.Listener

	errc      chan error
	serving   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewSilo checks cfg and returns a silo for the agent types of reg.
func NewSilo(cfg SiloConfig, reg *grain.Registry) (*Silo, error) {
	if reg == nil {
		return nil, errors.New("cluster: NewSilo: nil Registry")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Runtime.Logger == nil {
		cfg.Runtime.Logger = cfg.Logger
	}
	if cfg.Gateway.Logger == nil {
		cfg.Gateway.Logger = cfg.Logger
	}
	if cfg.ShutdownTimeout <= 0 {
		return nil, fmt.Errorf("cluster: ShutdownTimeout %v must be positive", cfg.ShutdownTimeout)
	}
	cfg.Runtime.Silo = cfg.Name
	cfg.Gateway.Silo = cfg.Name
	cfg.Gateway.Addr = cfg.GatewayAddr
	cfg.Gateway.GatewayAddr = cfg.GatewayAddr
	cfg.Gateway.Insecure = cfg.Insecure
	cfg.Gateway.MaxMessageSize = cfg.Runtime.MaxMessageSize
	if err := cfg.Runtime.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Gateway.Validate(); err != nil {
		return nil, err
	}
	return &Silo{cfg: cfg, reg: reg, logger: cfg.Logger, errc: make(chan error, 2)}, nil
}

// Start starts the runtime and begins serving the gateway and the HTTP
// endpoints. It returns once the listeners are bound.
func (s *Silo) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	ecfg := s.cfg.Etcd
	if ecfg.Logger == nil {
		ecfg.Logger = s.logger
	}
	if s.etcd, err = StartEtcd(ctx, ecfg); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if s.reminders, err = reminders.New(ctx, reminders.Config{
		Client:    s.etcd.Client(),
		Prefix:    s.etcd.Prefix(),
		MinPeriod: s.cfg.MinReminderPeriod,
		Known:     func(t string) bool { _, ok := s.reg.Lookup(t); return ok },
		Logger:    s.logger,
	}); err != nil {
		return fmt.Errorf("reminders: %w", err)
	}
	if s.acl, err = startACL(ctx, s.etcd, s.cfg.ACLFile, s.logger); err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	relay := new(SessionRelay)
	rcfg := s.cfg.Runtime
	rcfg.Sessions = relay
	rcfg.Configs = NewEtcdConfigStore(s.etcd)
	rcfg.Reminders = s.reminders
	if s.rt, err = grain.New(rcfg, s.reg); err != nil {
		return err
	}
	s.reminders.Start(s.rt.Send)
	var lc net.ListenConfig
	if s.gwLis, err = lc.Listen(ctx, "tcp", s.cfg.GatewayAddr); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if s.cfg.HTTPAddr != "" {
		if s.httpLis, err = lc.Listen(ctx, "tcp", s.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	gcfg := s.cfg.Gateway
	gcfg.GatewayAddr = s.gwLis.Addr().String()
	gcfg.ACL = s.acl
	if s.gw, err = NewGateway(gcfg, s.rt); err != nil {
		return err
	}
	if s.httpLis != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("GET /readyz", s.readyz)
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.serve("http", func() error {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	s.serve("gateway", func() error { return s.gw.Serve(s.gwLis) })
	return nil
}

// serve runs f on a goroutine and reports its error on Err.
func (s *Silo) serve(what string, f func() error) {
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := f(); err != nil {
			s.errc <- fmt.Errorf("%s: %w", what, err)
		}
	}()
}

func (s *Silo) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.rt == nil || s.gw == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	if err := s.gw.checkDraining(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Runtime returns the silo's grain runtime (nil before Start).
func (s *Silo) Runtime() *grain.Runtime { return s.rt }

// GatewayAddr returns the address the gateway listens on.
func (s *Silo) GatewayAddr() string {
	if s.gwLis == nil {
		return ""
	}
	return s.gwLis.Addr().String()
}

// HTTPAddr returns the address of the HTTP endpoints, or "" if off.
func (s *Silo) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Err delivers an error if a server of the silo fails while serving.
func (s *Silo) Err() <-chan error { return s.errc }

// Close shuts the silo down gracefully: the gateway stops taking new work
// and waits for the calls in flight, every activation is deactivated (running
// OnDeactivate), then the servers stop. If ctx ends first, what is left is cut
// short and Close returns the context's error.
func (s *Silo) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
			defer cancel()
		}
		s.closeErr = s.shutdown(ctx)
	})
	return s.closeErr
}

func (s *Silo) shutdown(ctx context.Context) error {
	var errsOut []error
	if s.gw != nil {
		drained := make(chan struct{})
		go func() {
			s.gw.GracefulStop()
			close(drained)
		}()
		select {
		case <-drained:
		case <-ctx.Done():
			s.gw.Stop()
			<-drained
			errsOut = append(errsOut, fmt.Errorf("gateway drain: %w", ctx.Err()))
		}
	}
	if s.acl != nil {
		s.acl.Close()
	}
	if s.reminders != nil {
		if err := s.reminders.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("reminders: %w", err))
		}
	}
	if s.rt != nil {
		if err := s.rt.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
		}
	}
	s.serving.Wait()
	if s.etcd != nil {
		if err := s.etcd.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("etcd: %w", err))
		}
	}
	return errors.Join(errsOut...)
}

// abort undoes a failed Start: nothing is serving yet.
func (s *Silo) abort() {
	for _, l := range []net.Listener{s.gwLis, s.httpLis} {
		if l != nil {
			l.Close()
		}
	}
	s.Close(context.Background())
}
