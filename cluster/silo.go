package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/inbox"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/topicstore"
	"github.com/agentsilo/agentsilo/internal/transport"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/memory"
	"github.com/agentsilo/agentsilo/reminders"
	"github.com/agentsilo/agentsilo/state"
	"github.com/agentsilo/agentsilo/topics"
)

// ErrFenced is reported on Silo.Err when the silo fenced itself: it could no
// longer be sure it holds its place in the membership view, so another silo
// may take over its agents. The silo must stop at once: Program tears it
// down (no OnDeactivate runs) and starts a new one under a new lease.
var ErrFenced = errs.New(codes.Unavailable, "fenced: the silo lost its membership lease and must stop serving")

// ErrUnreachable is reported on Silo.Err when a majority of the other silos
// could not reach this silo's peer port, so it marked itself unreachable
// and ran its agents down (docs/cluster.md). It serves nothing more in this
// run; Main closes it and starts it again, after a pause, as a new member
// that the others probe again.
var ErrUnreachable = errs.New(codes.Unavailable, "unreachable: the other silos could not reach this silo's peer port; it drained and must start again")

// Silo is one agentsilo server: the grain runtime, the client gateway in
// front of it (authenticating clients and enforcing the ACL), the
// silo-to-silo transport, its membership in the cluster, and its durable
// state in etcd (reminders, agent configurations, the ACL). Its lifecycle
// is NewSilo, Start, then Close; Err reports a failure while serving.
//
// Start builds the parts in dependency order, each given what it needs:
//
//	etcd → ACL → listeners → membership → transport → router → sessions →
//	reminders → topics → runtime → peer handler, view follower, gateway
//
// then starts them: the peer server, the membership (joining the view),
// the view follower, the reminders, and last the HTTP endpoints and the
// gateway.
type Silo struct {
	cfg    SiloConfig
	sub    subConfigs // the parts' configurations (subconfig.go)
	reg    *grain.Registry
	logger *slog.Logger
	clk    clock.Clock

	etcd      *etcdstore.Store
	acl       *acl.Authority
	gwLis     net.Listener
	peerLis   net.Listener
	httpLis   net.Listener
	dash      siloDashboard // the dashboard's gateway connection and TLS listener (silo_dashboard.go)
	hooks     testHooks     // fault injection, in a build with the test hooks (testhooks.go)
	members   *membership.Membership
	tp        *transport.Transport
	router    *router
	reminders *reminders.Service
	topics    *topics.Service
	topicJS   *topicstore.JetStreamStore // nil unless TopicStore is NATS
	state     state.Store
	audit     *audit.Log  // nil when the audit is off
	auditSt   audit.Store // the audit's store, closed with the silo
	auditStop context.CancelFunc
	rt        *grain.Runtime
	views     *views
	sessions  *sessionsFollowViews // keeps client sessions surviving their silo (sessions.go)
	gw        *gateway.Gateway
	a2a       *a2a.Server // nil unless A2A.Addr is set
	a2aLis    net.Listener
	inboxes   *inbox.Inboxes // when A2A or MCP is on
	mcp       *mcp.Server    // nil unless MCP.Addr is set
	mcpLis    net.Listener
	peerSrv   *grpc.Server
	http      *http.Server
	metrics   *metrics
	// collectors are the silo's collectors in cfg.Metrics, taken out at
	// Close.
	collectors *collectorSet
	joined     bool // the membership started: the silo is in the view

	// dir is the service directory (silo_directory.go).
	dir *dirRef
	// declared follows the types declared without code (declared.go).
	declared *declaredTypes

	stopc     chan struct{}
	errc      chan error // the first failure while serving; later ones are logged
	serving   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewSilo checks cfg and returns a silo for the agent types of reg. It
// fills what cfg leaves empty, makes each part's configuration from it, and
// refuses an invalid setting with InvalidArgument.
func NewSilo(cfg SiloConfig, reg *grain.Registry) (*Silo, error) {
	if reg == nil {
		return nil, errs.New(codes.InvalidArgument, "cluster: NewSilo: nil Registry")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(TraceLogHandler(cfg.Logger.Handler()))
	if cfg.clock == nil {
		cfg.clock = clock.Real{}
	}
	if cfg.ShutdownTimeout <= 0 {
		return nil, errs.New(codes.InvalidArgument, "cluster: ShutdownTimeout %v must be positive", cfg.ShutdownTimeout)
	}
	sub, err := newSubConfigs(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.GossipAddr == "" {
		cfg.GossipAddr = "127.0.0.1:0"
	}
	if err := checkExposure(&cfg); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
		if err := registerRuntimeCollectors(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("cluster: metrics: %w", err)
		}
	}
	collectors := &collectorSet{reg: cfg.Metrics}
	m, err := newMetrics(collectors)
	if err != nil {
		collectors.unregisterAll()
		return nil, fmt.Errorf("cluster: metrics (a registry per silo): %w", err)
	}
	sub.runtime.Observer = teeObserver(m, sub.runtime.Observer)
	dir := &dirRef{}
	if err := registerTypes(&cfg, reg, dir, sub.delegator); err != nil {
		collectors.unregisterAll()
		return nil, err
	}
	return &Silo{cfg: cfg, sub: sub, reg: reg, dir: dir, logger: cfg.Logger, clk: cfg.clock, metrics: m, collectors: collectors, errc: make(chan error, 1), stopc: make(chan struct{})}, nil
}

// registerTypes registers the agent types a silo brings, unless the
// program registered its own: A2A (remote A2A agents as agents) when A2A is
// on, MCP (outside MCP servers as agents) and Memory.
// --a2a-allow-private-networks lifts the A2A type's SSRF guard,
// --mcp-allow-private-networks the MCP type's.
func registerTypes(cfg *SiloConfig, reg *grain.Registry, dir *dirRef, d *auth.Delegator) error {
	if _, ok := reg.Lookup(a2a.RemoteType); !ok && cfg.A2A.Addr != "" {
		opts := a2a.RemoteOptions{AllowPrivateNetworks: cfg.A2A.AllowPrivateNetworks, Resolve: dir.resolveA2A,
			FollowCheck: cfg.MinReminderPeriod, Metrics: cfg.Metrics, TracerProvider: cfg.TracerProvider}
		if d != nil {
			opts.Delegate = d.Token
		}
		opts.SkillScopes = dir.skillScopesA2A
		if err := a2a.RegisterRemote(reg, opts); err != nil {
			return err
		}
	}
	if _, ok := reg.Lookup(mcp.RemoteType); !ok {
		opts := mcp.RemoteOptions{AllowPrivateNetworks: cfg.MCP.AllowPrivateNetworks, Resolve: dir.resolveMCP, SkillScopes: dir.skillScopesMCP, Version: Version()}
		if d != nil {
			opts.Delegate = d.Token
		}
		if err := mcp.RegisterRemote(reg, opts); err != nil {
			return err
		}
	}
	if _, ok := reg.Lookup(memory.Type); !ok {
		if err := memory.Register(reg, memory.Config{}); err != nil {
			return err
		}
	}
	return nil
}

// auditSweepPeriod is how often a silo removes the audit records past
// their retention (every silo does; they take turns through the heads'
// compare-and-swap).
const auditSweepPeriod = time.Hour

// Start builds the silo's parts and starts them (see Silo). It returns once
// the silo is in the cluster's view and serves, bounded by ctx. After a
// failed Start, everything started is stopped again.
func (s *Silo) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	if err := s.build(ctx); err != nil {
		return err
	}

	s.serve("peer", func() error { return s.peerSrv.Serve(s.peerLis) })
	if err := s.members.Start(ctx); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	s.joined = true
	s.logger.Info("storage", describeStorage(&s.cfg)...)
	if s.cfg.PeerTLS.Enabled() && s.cfg.GossipKeyFile != "" {
		s.logger.Info("silos authenticated: peer port with mutual TLS, gossip encrypted", describeSecurity(&s.cfg)...)
	} else {
		s.logger.Warn("silos not all authenticated: the peer and gossip ports take anyone who reaches them", describeSecurity(&s.cfg)...)
	}
	s.views.start()
	if s.audit != nil {
		actx, cancel := context.WithCancel(context.Background())
		s.auditStop = cancel
		s.serve("audit sweep", func() error { s.audit.SweepEvery(actx, auditSweepPeriod); return nil })
	}
	s.sessions.start()
	startReminders(s.reminders, s.rt, s.clk)
	s.topics.Start(s.rt.Ask)
	if err := s.dir.Load().Start(ctx); err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	if err := s.collectors.Register(newSiloCollector(s)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	s.takePorts() // the ports a silo program keeps come to this silo from now on (silo_ports.go)
	if s.http != nil {
		s.serve("http", func() error {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	s.serve("gateway", func() error { return s.gw.Serve(s.gwLis) })
	if err := s.serveDashboard(ctx); err != nil { // silo_dashboard.go
		return err
	}
	if s.a2a != nil {
		if err := s.a2a.Start(ctx); err != nil {
			return fmt.Errorf("a2a: %w", err)
		}
		s.serve("a2a", func() error { return s.a2a.Serve(s.a2aLis) })
	}
	if s.mcp != nil {
		s.serve("mcp", func() error { return s.mcp.Serve(s.mcpLis) })
	}
	s.serving.Add(1)
	go s.watchFence()
	return nil
}

// watchFence reports ErrFenced when the membership fences the silo.
func (s *Silo) watchFence() {
	defer s.serving.Done()
	select {
	case <-s.members.Fenced():
		s.logger.Error("fenced", "cause", s.members.FenceCause())
		s.gw.SetServing(false)
		s.fail(ErrFenced)
	case <-s.stopc:
	}
}

// serve runs f on a goroutine and reports its error on Err.
func (s *Silo) serve(what string, f func() error) {
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := f(); err != nil {
			s.fail(fmt.Errorf("%s: %w", what, err))
		}
	}()
}

// fail reports err on Err if it is the first failure, and logs it
// otherwise: it never blocks, so shutdown never waits for a reader of Err.
func (s *Silo) fail(err error) {
	select {
	case s.errc <- err:
	default:
		s.logger.Error("silo failure after the first", "err", err)
	}
}

func (s *Silo) readyz(w http.ResponseWriter, _ *http.Request) {
	if why := s.notReady(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Metrics returns the Prometheus registry of the silo's metrics, which
// /metrics serves.
func (s *Silo) Metrics() *prometheus.Registry { return s.cfg.Metrics }

// Runtime returns the silo's grain runtime (nil before Start).
func (s *Silo) Runtime() *grain.Runtime { return s.rt }

// GatewayAddr returns the address the gateway listens on.
func (s *Silo) GatewayAddr() string {
	if s.gwLis == nil {
		return ""
	}
	return s.gwLis.Addr().String()
}

// A2AAddr returns the address the A2A server listens on, or "" if off.
func (s *Silo) A2AAddr() string {
	if s.a2aLis == nil {
		return ""
	}
	return s.a2aLis.Addr().String()
}

// MCPAddr returns the address the MCP server listens on, or "" if off.
func (s *Silo) MCPAddr() string {
	if s.mcpLis == nil {
		return ""
	}
	return s.mcpLis.Addr().String()
}

// MCP returns the silo's MCP server (for adding tools of its own), nil
// when MCP is off or before Start.
func (s *Silo) MCP() *mcp.Server { return s.mcp }

// HTTPAddr returns the address of the HTTP endpoints, or "" if off.
func (s *Silo) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Err delivers the first error of a server of the silo that fails while
// serving (ErrFenced if the silo fenced itself). Nobody has to read it.
func (s *Silo) Err() <-chan error { return s.errc }
