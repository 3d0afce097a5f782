package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/cluster/gateway"
	"github.com/agentsilo/agentsilo/cluster/membership"
	"github.com/agentsilo/agentsilo/cluster/transport"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/faults"
	"github.com/agentsilo/agentsilo/internal/inbox"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/tracing"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/memory"
	"github.com/agentsilo/agentsilo/reminders"
	"github.com/agentsilo/agentsilo/state"
	"github.com/agentsilo/agentsilo/topics"
)

// SiloConfig configures a Silo. Start from DefaultSiloConfig.
type SiloConfig struct {
	// Name names the silo. Default: the host name.
	Name string
	// GatewayAddr is the client gateway's listen address. Default:
	// 127.0.0.1:7070; port 0 picks a free port (see Silo.GatewayAddr).
	GatewayAddr string
	// HTTPAddr serves /healthz, /readyz, /metrics and the dashboard (/ui);
	// empty turns it off.
	// Default: 127.0.0.1:8080.
	HTTPAddr string
	// Metrics is the Prometheus registry the silo registers its metrics in
	// (see metrics.go) and serves at /metrics. Each silo needs its own: a
	// second silo registering in the same one fails NewSilo. Nil: a new
	// registry, with the Go runtime's and the process's metrics too.
	Metrics *prometheus.Registry
	// TracerProvider makes the silo's spans (see internal/tracing). Nil:
	// otel.GetTracerProvider(), a no-op unless the program sets one.
	TracerProvider trace.TracerProvider
	// Insecure lets the gateway listen on a non-loopback address without
	// authentication, and the peer and gossip ports without mutual TLS and
	// a gossip key (--insecure; see security.go).
	Insecure bool
	// PeerTLS secures the silo-to-silo transport with mutual TLS
	// (--peer-tls-cert, --peer-tls-key, --peer-tls-ca, --peer-tls-name).
	PeerTLS PeerTLSConfig
	// GossipKeyFile encrypts gossip with memberlist's key ring: base64 keys
	// of 16, 24 or 32 bytes, one a line, the first used to encrypt
	// (--gossip-key-file). Read again when it changes.
	GossipKeyFile string
	// ShutdownTimeout bounds Close when the caller's context has no deadline.
	// Default: 30 s.
	ShutdownTimeout time.Duration
	// Etcd says where the silo keeps durable state: an external etcd, or an
	// embedded one in Etcd.DataDir (the default).
	Etcd etcdstore.Config
	// StateStore says where agents' state (Host.LoadState, SaveState) is
	// kept (--state-store): "" or "etcd" for the silo's etcd, or a
	// postgres:// URL for PostgreSQL (see package state).
	StateStore string
	// TopicStore says where topics keep subscriptions, queues and dead
	// letters (--topic-store): "" or "etcd" for the silo's etcd, or
	// nats://HOST:PORT (several comma-separated) for NATS JetStream (see
	// topics.JetStreamStore), with TopicNATS's credentials, TLS, bucket
	// and replicas (its URL is TopicStore; fields left zero take
	// topics.DefaultJetStreamConfig's values).
	TopicStore string
	TopicNATS  topics.JetStreamConfig
	// MinReminderPeriod is the shortest reminder period accepted. Default:
	// 1 min.
	MinReminderPeriod time.Duration
	// PeerAddr is the listen address of the silo-to-silo transport
	// (--peer-addr). Default: 127.0.0.1:0 (a free port; `silo` uses 7071).
	PeerAddr string
	// GossipAddr is memberlist's bind address, IP:port (--gossip-addr).
	// Default: 127.0.0.1:0 (`silo` uses 7946).
	GossipAddr string
	// AdvertiseAddr is the host (an IP) other silos and clients reach this
	// silo at, when the listen addresses are unspecified (0.0.0.0) or not
	// reachable as they are (--advertise-addr). Default: the listen hosts.
	AdvertiseAddr string
	// Join lists gossip seeds, host:port or DNS names expanded to all their
	// addresses (--join). Silos already in etcd's view are joined too.
	Join []string
	// LeaseTTL and FenceAfter tune the membership (see membership.Config).
	// Zero: the defaults, 2 s and membership.LeaseBound of the lease.
	LeaseTTL   time.Duration
	FenceAfter time.Duration
	// FaultInjection serves POST /debug/partition?on=true|false on HTTPAddr,
	// cutting the silo off from its peers (not from etcd or clients). For
	// tests only.
	FaultInjection bool
	// ACLFile seeds the cluster's ACL in etcd when none is stored yet
	// (--acl-file): FabrCore's "Acl" JSON section. Empty: no seed.
	ACLFile string
	// TrustedAgents turns off the check of agents' messages to other
	// owners' agents (--trusted-agents): an agent may then message any
	// agent, with its own rights lent to whoever made it call. By default
	// such a message is checked against the ACL as the principal that
	// started its call chain (see grain.Authorizer).
	TrustedAgents bool
	// Runtime configures the grain runtime. Its Silo is Name (leave it
	// empty or equal); its Sessions, Placement, Configs, Reminders and State are
	// the silo's (leave them nil); the silo's metrics observe it beside the
	// Observer given, if any.
	Runtime grain.Config
	// Topics configures publish/subscribe (see package topics). Its Store,
	// Owns, Known, Observe, Clock and Logger are the silo's (leave them
	// unset).
	Topics topics.Config
	// Gateway configures the gateway. Its Silo is Name and its Addr is
	// GatewayAddr (leave them empty or equal); its Insecure is Insecure
	// or'ed, its MaxMessageSize is Runtime's, and its ACL, Cluster and
	// TracerProvider are the silo's (leave them unset).
	Gateway gateway.Config
	// A2A configures the A2A server (package a2a): every agent as an A2A
	// agent at A2A.Addr (--a2a-addr; empty: off). Its Silo is Name, and its
	// Auth and Insecure are the gateway's when left empty (the same
	// --auth-file and TLS flags). With it on, the silo registers the agent
	// type A2A (a2a.RemoteType, remote A2A agents as agents) unless the
	// registry has one.
	A2A a2a.Config
	// DirectoryRefresh is how often the service directory fetches an
	// outside entry again, its card or its tools (--directory-refresh;
	// see package directory). Default: 2 min.
	DirectoryRefresh time.Duration
	// MCP configures the MCP server (package mcp): every agent's skills as
	// tools for MCP clients at MCP.Addr (--mcp-addr; empty: off). Its Silo
	// is Name, and its Auth and Insecure are the gateway's when left empty
	// (the same --auth-file and TLS flags).
	MCP mcp.Config
	// Clock drives membership (keepalives, fencing, the revocation grace),
	// routing waits, reminders, and the runtime's idle collection and timers
	// (unless Runtime.Clock is set). Default: the real clock. For tests.
	Clock clock.Clock
	// Logger receives the silo's logs; its handler is wrapped with
	// TraceLogHandler. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultSiloConfig returns the defaults described on SiloConfig's fields.
func DefaultSiloConfig() SiloConfig {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "silo"
	}
	cfg := SiloConfig{
		Name:              name,
		GatewayAddr:       "127.0.0.1:7070",
		HTTPAddr:          "127.0.0.1:8080",
		ShutdownTimeout:   30 * time.Second,
		Etcd:              etcdstore.DefaultConfig(),
		MinReminderPeriod: time.Minute,
		PeerAddr:          "127.0.0.1:0",
		GossipAddr:        "127.0.0.1:0",
		Runtime:           grain.DefaultConfig(),
		Gateway:           gateway.DefaultConfig(),
		A2A:               a2a.DefaultConfig(),
		MCP:               mcp.DefaultConfig(),
		Topics:            topics.DefaultConfig(),
	}
	cfg.Topics.Clock = nil
	// What the silo sets from its own fields is left empty here.
	cfg.Runtime.Silo = ""
	cfg.Gateway.Silo, cfg.Gateway.Addr = "", ""
	return cfg
}

// ErrFenced is reported on Silo.Err when the silo fenced itself: it could no
// longer be sure it holds its place in the membership view, so another silo
// may take over its agents. The silo must stop at once: Program tears it
// down (no OnDeactivate runs) and starts a new one under a new lease.
var ErrFenced = errors.New("fenced: the silo lost its membership lease and must stop serving")

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
	reg    *grain.Registry
	logger *slog.Logger
	clk    clock.Clock

	etcd      *etcdstore.Store
	acl       *acl.Authority
	gwLis     net.Listener
	peerLis   net.Listener
	httpLis   net.Listener
	faults    *faults.Faults
	members   *membership.Membership
	tp        *transport.Transport
	router    *router
	reminders *reminders.Service
	topics    *topics.Service
	topicJS   *topics.JetStreamStore // nil unless TopicStore is NATS
	state     state.Store
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
	joined    bool // the membership started: the silo is in the view

	// dir is the service directory (silo_directory.go).
	dir *dirRef

	stopc     chan struct{}
	errc      chan error // the first failure while serving; later ones are logged
	serving   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewSilo checks cfg and returns a silo for the agent types of reg. It
// fills what cfg leaves empty, and refuses, with InvalidArgument, a value
// that the silo would have to overwrite (see SiloConfig.Runtime and
// Gateway).
func NewSilo(cfg SiloConfig, reg *grain.Registry) (*Silo, error) {
	if reg == nil {
		return nil, errs.New(codes.InvalidArgument, "cluster: NewSilo: nil Registry")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(TraceLogHandler(cfg.Logger.Handler()))
	if cfg.Runtime.Logger == nil {
		cfg.Runtime.Logger = cfg.Logger
	}
	if cfg.Gateway.Logger == nil {
		cfg.Gateway.Logger = cfg.Logger
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Runtime.Clock == nil {
		cfg.Runtime.Clock = cfg.Clock
	}
	if cfg.ShutdownTimeout <= 0 {
		return nil, errs.New(codes.InvalidArgument, "cluster: ShutdownTimeout %v must be positive", cfg.ShutdownTimeout)
	}
	if err := fill(&cfg.Runtime.Silo, cfg.Name, "Runtime.Silo"); err != nil {
		return nil, err
	}
	if err := fill(&cfg.Gateway.Silo, cfg.Name, "Gateway.Silo"); err != nil {
		return nil, err
	}
	if err := fill(&cfg.Gateway.Addr, cfg.GatewayAddr, "Gateway.Addr"); err != nil {
		return nil, err
	}
	switch {
	case cfg.Runtime.Sessions != nil, cfg.Runtime.Placement != nil, cfg.Runtime.Configs != nil, cfg.Runtime.Reminders != nil, cfg.Runtime.State != nil, cfg.Runtime.Authorizer != nil:
		return nil, errs.New(codes.InvalidArgument, "cluster: SiloConfig.Runtime's Sessions, Placement, Configs, Reminders, State and Authorizer are the silo's: leave them nil (StateStore chooses the state store, TrustedAgents turns the Authorizer off)")
	case cfg.Topics.Store != nil, cfg.Topics.Owns != nil, cfg.Topics.Known != nil, cfg.Topics.Observe != nil, cfg.Topics.Clock != nil, cfg.Topics.Logger != nil:
		return nil, errs.New(codes.InvalidArgument, "cluster: SiloConfig.Topics's Store, Owns, Known, Observe, Clock and Logger are the silo's: leave them unset")
	case cfg.Runtime.Topics != nil, cfg.Runtime.Broadcast != nil:
		return nil, errs.New(codes.InvalidArgument, "cluster: SiloConfig.Runtime's Topics and Broadcast are the silo's: leave them nil")
	case cfg.Gateway.ACL != nil, cfg.Gateway.Cluster != nil, cfg.Gateway.TracerProvider != nil, cfg.Gateway.Topics != nil, cfg.Gateway.Broadcast != nil:
		return nil, errs.New(codes.InvalidArgument, "cluster: SiloConfig.Gateway's ACL, Cluster, Topics, Broadcast and TracerProvider are the silo's: leave them unset (use SiloConfig.TracerProvider)")
	}
	cfg.Gateway.Insecure = cfg.Gateway.Insecure || cfg.Insecure
	cfg.Gateway.MaxMessageSize = cfg.Runtime.MaxMessageSize
	if err := cfg.Runtime.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Gateway.Validate(); err != nil {
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
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("cluster: metrics (a registry per silo): %w", err)
	}
	cfg.Runtime.Observer = teeObserver(m, cfg.Runtime.Observer)
	dir := &dirRef{}
	if err := configureA2A(&cfg, reg, dir); err != nil {
		return nil, err
	}
	// The MCP agent type (outside MCP servers as agents), unless the
	// program registered one; --a2a-allow-private-networks lifts its SSRF
	// guard too.
	if _, ok := reg.Lookup(mcp.RemoteType); !ok {
		if err := mcp.RegisterRemote(reg, mcp.RemoteOptions{AllowPrivateNetworks: cfg.A2A.AllowPrivateNetworks, Resolve: dir.resolveMCP, Version: Version()}); err != nil {
			return nil, err
		}
	}
	if _, ok := reg.Lookup(memory.Type); !ok {
		if err := memory.Register(reg, memory.Config{}); err != nil {
			return nil, err
		}
	}
	if err := configureMCP(&cfg); err != nil {
		return nil, err
	}
	return &Silo{cfg: cfg, reg: reg, dir: dir, logger: cfg.Logger, clk: cfg.Clock, metrics: m, errc: make(chan error, 1), stopc: make(chan struct{})}, nil
}

// fill sets *field to v if it is empty, and refuses a different value.
func fill(field *string, v, name string) error {
	switch *field {
	case "":
		*field = v
	case v:
	default:
		return errs.New(codes.InvalidArgument, "cluster: SiloConfig.%s is %q, but the silo's is %q: leave it empty", name, *field, v)
	}
	return nil
}

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
	s.sessions.start()
	startReminders(s.reminders, s.rt, s.clk)
	s.topics.Start(s.rt.Ask)
	if err := s.dir.Load().Start(ctx); err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	if err := s.cfg.Metrics.Register(newSiloCollector(s)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if s.http != nil {
		s.serve("http", func() error {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	s.serve("gateway", func() error { return s.gw.Serve(s.gwLis) })
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

// build makes the silo's parts, in dependency order, each constructor given
// what it needs; nothing serves yet but the embedded etcd and the ACL's
// watch.
func (s *Silo) build(ctx context.Context) (err error) {
	ecfg := s.cfg.Etcd
	if ecfg.Logger == nil {
		ecfg.Logger = s.logger
	}
	if s.etcd, err = etcdstore.Start(ctx, ecfg); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if s.acl, err = startACL(ctx, s.etcd, s.cfg.ACLFile, s.metrics.denied, s.logger); err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	var lc net.ListenConfig
	if s.gwLis, err = lc.Listen(ctx, "tcp", s.cfg.GatewayAddr); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if s.peerLis, err = lc.Listen(ctx, "tcp", s.cfg.PeerAddr); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	if s.cfg.HTTPAddr != "" {
		if s.httpLis, err = lc.Listen(ctx, "tcp", s.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	if s.cfg.A2A.Addr != "" {
		if s.a2aLis, err = lc.Listen(ctx, "tcp", s.cfg.A2A.Addr); err != nil {
			return fmt.Errorf("a2a: %w", err)
		}
	}
	if s.cfg.MCP.Addr != "" {
		if s.mcpLis, err = lc.Listen(ctx, "tcp", s.cfg.MCP.Addr); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	if s.cfg.FaultInjection {
		s.faults = faults.New()
		s.peerLis = s.faults.Listener(s.peerLis)
	}
	peerAddr := advertised(s.peerLis.Addr().String(), s.cfg.AdvertiseAddr)
	if s.members, err = membership.New(membership.Config{
		Name:        s.cfg.Name,
		PeerAddr:    peerAddr,
		GatewayAddr: advertised(s.gwLis.Addr().String(), s.cfg.AdvertiseAddr),
		GossipAddr:  s.cfg.GossipAddr,
		Join:        s.cfg.Join,
		Client:      s.etcd.Client(),
		Prefix:      s.etcd.Prefix(),
		LeaseTTL:    s.cfg.LeaseTTL,
		FenceAfter:  s.cfg.FenceAfter,
		Clock:       s.clk,
		Logger:      s.logger,
		Gossip:      s.gossipConfig,
		KeyFile:     s.cfg.GossipKeyFile,
	}); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	tcfg := transport.Config{
		Self:           s.cfg.Name,
		Logger:         s.logger,
		MaxMessageSize: s.cfg.Runtime.MaxMessageSize,
		// A broken stream to a peer whose port refuses connections proves
		// it dead: the membership removes it at once.
		OnPeerState: func(addr string, up bool) {
			if !up {
				s.members.Suspect(addr)
			}
		},
	}
	if s.faults != nil {
		tcfg.DialOptions = append(tcfg.DialOptions, grpc.WithContextDialer(s.faults.Dial))
	}
	if tcfg.TLS, err = s.cfg.PeerTLS.open(); err != nil {
		return err
	}
	tcfg.TLSName = s.cfg.PeerTLS.Name
	if s.tp, err = transport.New(tcfg); err != nil {
		return err
	}
	tracer := tracing.New(s.cfg.TracerProvider)
	s.router = newRouter(s.cfg.Name, s.members, s.tp, tracer, s.clk, s.logger)
	sessions, err := gateway.NewSessions(s.cfg.Gateway, s.cfg.Name)
	if err != nil {
		return err
	}
	if s.reminders, err = reminders.New(ctx, reminders.Config{
		Client:    s.etcd.Client(),
		Prefix:    s.etcd.Prefix(),
		MinPeriod: s.cfg.MinReminderPeriod,
		Known:     func(t string) bool { _, ok := s.reg.Lookup(t); return ok },
		View:      s.router.reminderView,
		Clock:     s.clk,
		Logger:    s.logger,

		ObserveLateness: s.metrics.observeLateness,
	}); err != nil {
		return fmt.Errorf("reminders: %w", err)
	}
	if s.state, err = state.Open(ctx, s.cfg.StateStore, s.etcd.Client(), s.etcd.Prefix()); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	rcfg := s.cfg.Runtime
	rcfg.State = s.state
	var local grain.SessionRouter = sessions
	if s.a2aLis != nil || s.mcpLis != nil {
		// What agents push to an A2A turn's or MCP call's sender reaches it.
		s.inboxes = inbox.New(s.cfg.Name, sessions)
		local = s.inboxes
	}
	keeper := newSessionKeeper(s.router, local, sessions, s.cfg.Gateway, s.clk, s.logger)
	sessionRt := &sessionRouter{r: s.router, local: local, keep: keeper}
	sessions.SetHome(sessionHome{r: s.router, keep: keeper}, s.logger)
	s.sessions = newSessionsFollowViews(s.router, keeper, sessions, sessionRt)
	rcfg.Sessions = sessionRt
	rcfg.Placement = s.router
	rcfg.Configs = etcdstore.NewConfigStore(s.etcd)
	rcfg.Reminders = s.reminders
	if s.topics, err = s.newTopics(ctx); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	rcfg.Topics = s.topics
	info := clusterInfo{r: s.router}
	rcfg.Broadcast = func(ctx context.Context, pattern string, msg *grain.Message) (int, error) {
		return info.broadcastPeers(ctx, pattern, msg)
	}
	d, err := s.newDirectory(&info)
	if err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	s.dir.Store(d)
	rcfg.Directory = directory.Service{Dir: d, ACL: s.acl}
	if !s.cfg.TrustedAgents {
		rcfg.Authorizer = aclAuthorizer{s.acl}
	}
	if s.rt, err = grain.New(rcfg, s.reg); err != nil {
		return err
	}
	info.rt = s.rt
	leaseTTL := s.cfg.LeaseTTL
	if leaseTTL == 0 {
		leaseTTL = membership.DefaultLeaseTTL
	}
	s.views = newViews(s.router, s.rt, remindersFollowViews(s.reminders, leaseTTL, s.clk), topicsFollowViews(s.topics), s.sessions.observe)
	s.peerSrv = grpc.NewServer(s.tp.ServerOptions()...)
	s.tp.Register(s.peerSrv, &peerHandler{r: s.router, rt: s.rt, silo: siloapi.Of(s.rt), tracer: tracer, sessions: sessionRt})
	gcfg := s.cfg.Gateway
	gcfg.Cluster = info
	gcfg.Topics = s.topics
	gcfg.Broadcast = info.Broadcast
	gcfg.ACL = s.acl
	gcfg.TracerProvider = s.cfg.TracerProvider
	if s.gw, err = gateway.New(gcfg, s.rt, sessions); err != nil {
		return err
	}
	s.gw.ServeDirectory(d)
	if s.a2aLis != nil {
		acfg := s.cfg.A2A
		acfg.Logger = s.logger
		if s.a2a, err = a2a.New(acfg, a2a.Deps{Outside: s.dir.outsideAgents, Runtime: s.rt, ACL: s.acl, Etcd: s.etcd.Client(), Prefix: s.etcd.Prefix(), Inboxes: s.inboxes}); err != nil {
			return err
		}
	}
	if s.mcpLis != nil {
		mcfg := s.cfg.MCP
		mcfg.Logger = s.logger
		if s.mcp, err = mcp.New(mcfg, mcp.Deps{Runtime: s.rt, ACL: s.acl, Inboxes: s.inboxes}); err != nil {
			return err
		}
		mcp.AddDirectoryTools(s.mcp, d, s.acl)
	}
	if s.httpLis != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("GET /readyz", s.readyz)
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		}))
		if s.faults != nil {
			mux.HandleFunc("POST /debug/partition", s.partition)
		}
		if err := s.mountDashboard(mux); err != nil { // /ui (silo_dashboard.go)
			return err
		}
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return nil
}

// gossipConfig adjusts memberlist's configuration: the advertised address,
// and the fault-injecting transport.
func (s *Silo) gossipConfig(c *memberlist.Config) {
	if s.cfg.AdvertiseAddr != "" {
		c.AdvertiseAddr = s.cfg.AdvertiseAddr
	}
	if s.faults != nil {
		t, err := faults.NewGossipTransport(s.faults, c.BindAddr, c.BindPort, c)
		if err != nil {
			s.logger.Error("fault injection: gossip transport", "err", err)
			return
		}
		c.Transport = t
	}
}

// advertised replaces the host of a listen address with host, if set, or,
// for an unspecified listen host, with the host name's first address.
func advertised(listen, host string) string {
	h, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host != "" {
		return net.JoinHostPort(host, port)
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			return net.JoinHostPort(name, port)
		}
	}
	return listen
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

// partition serves POST /debug/partition?on=true|false (fault injection).
func (s *Silo) partition(w http.ResponseWriter, req *http.Request) {
	on, err := strconv.ParseBool(req.URL.Query().Get("on"))
	if err != nil {
		http.Error(w, "want ?on=true or ?on=false", http.StatusBadRequest)
		return
	}
	s.faults.SetIsolated(on)
	s.logger.Warn("fault injection: partition from peers", "on", on)
	fmt.Fprintln(w, "ok")
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
	// Hand the agents over: from the view in which the record is marked
	// leaving, every silo routes this silo's addresses to their new owners,
	// which ask this silo to release each one before activating it.
	fenced, joined := false, s.joined
	if s.members != nil {
		select {
		case <-s.members.Fenced():
			fenced = true
		default:
		}
	}
	if s.gw != nil {
		s.gw.SetServing(false)
	}
	// Cut off from etcd, the silo cannot leave: it stops without, and the
	// others take its agents over once its lease expires.
	leave := joined && !fenced && !s.cutOff()
	if leave {
		if err := s.members.MarkLeaving(ctx); err != nil {
			errsOut = append(errsOut, fmt.Errorf("membership: %w", err))
		}
	}
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
	if s.a2a != nil {
		// Its turns run in the runtime: before the runtime closes.
		if err := s.a2a.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if s.mcp != nil {
		// Its calls run in the runtime: before the runtime closes.
		if err := s.mcp.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if d := s.Directory(); d != nil {
		d.Close()
	}
	if s.acl != nil {
		s.acl.Close()
	}
	if s.reminders != nil {
		if err := s.reminders.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("reminders: %w", err))
		}
	}
	if s.topics != nil {
		if err := s.topics.Close(ctx); err != nil {
			errsOut = append(errsOut, fmt.Errorf("topics: %w", err))
		}
	}
	if s.topicJS != nil {
		s.topicJS.Close()
	}
	if s.rt != nil {
		if err := s.rt.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if s.state != nil {
		if err := s.state.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("state store: %w", err))
		}
	}
	close(s.stopc)
	if s.members != nil {
		if leave {
			if err := s.members.Leave(ctx); err != nil {
				errsOut = append(errsOut, fmt.Errorf("membership: %w", err))
			}
		}
		s.members.Close()
	}
	if s.views != nil {
		s.views.stop()
	}
	if s.sessions != nil {
		s.sessions.stop()
	}
	if s.peerSrv != nil {
		s.peerSrv.Stop()
	}
	if s.tp != nil {
		s.tp.Close()
	}
	if s.sessions != nil {
		s.sessions.wait() // the pushes peers sent, handed on
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

// abort undoes a failed Start.
func (s *Silo) abort() {
	for _, l := range []net.Listener{s.gwLis, s.httpLis, s.peerLis, s.a2aLis, s.mcpLis} {
		if l != nil {
			l.Close()
		}
	}
	s.Close(context.Background())
}

// configureA2A fills what the A2A server takes from the silo (its name,
// the gateway's authentication) and registers the A2A agent type, when
// A2A is on.
func configureA2A(cfg *SiloConfig, reg *grain.Registry, dir *dirRef) error {
	if cfg.A2A.Addr == "" {
		return nil
	}
	if err := fill(&cfg.A2A.Silo, cfg.Name, "A2A.Silo"); err != nil {
		return err
	}
	if a := cfg.A2A.Auth; a.KeyFile == "" && len(a.Keys) == 0 && a.TLSCert == "" && a.TLSClientCA == "" {
		cfg.A2A.Auth = cfg.Gateway.Auth
	}
	cfg.A2A.Insecure = cfg.A2A.Insecure || cfg.Insecure
	if d := a2a.DefaultConfig(); cfg.A2A.LeaseTTL == 0 || cfg.A2A.LeaseTTL == d.LeaseTTL {
		cfg.A2A.LeaseTTL = d.LeaseTTL
		if cfg.LeaseTTL > 0 {
			cfg.A2A.LeaseTTL = cfg.LeaseTTL // --lease-ttl: the same liveness for both
		}
	}
	if cfg.A2A.Version == "" || cfg.A2A.Version == a2a.DefaultConfig().Version {
		cfg.A2A.Version = Version()
	}
	if err := cfg.A2A.Validate(); err != nil {
		return errs.Wrap(codes.InvalidArgument, err, "cluster")
	}
	if _, ok := reg.Lookup(a2a.RemoteType); !ok {
		if err := a2a.RegisterRemote(reg, a2a.RemoteOptions{AllowPrivateNetworks: cfg.A2A.AllowPrivateNetworks, Resolve: dir.resolveA2A,
			FollowCheck: cfg.MinReminderPeriod, Metrics: cfg.Metrics, TracerProvider: cfg.TracerProvider}); err != nil {
			return err
		}
	}
	return nil
}

// configureMCP fills what the MCP server takes from the silo (its name,
// the gateway's authentication), when MCP is on.
func configureMCP(cfg *SiloConfig) error {
	if cfg.MCP.Addr == "" {
		return nil
	}
	if err := fill(&cfg.MCP.Silo, cfg.Name, "MCP.Silo"); err != nil {
		return err
	}
	if a := cfg.MCP.Auth; a.KeyFile == "" && len(a.Keys) == 0 && a.TLSCert == "" && a.TLSClientCA == "" {
		cfg.MCP.Auth = cfg.Gateway.Auth
	}
	cfg.MCP.Insecure = cfg.MCP.Insecure || cfg.Insecure
	if cfg.MCP.Version == "" || cfg.MCP.Version == mcp.DefaultConfig().Version {
		cfg.MCP.Version = Version()
	}
	if err := cfg.MCP.Validate(); err != nil {
		return errs.Wrap(codes.InvalidArgument, err, "cluster")
	}
	return nil
}
