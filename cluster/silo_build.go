package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/audit/auditstore"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/inbox"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/tracing"
	"github.com/agentsilo/agentsilo/internal/transport"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/mcp"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/reminders"
	"github.com/agentsilo/agentsilo/state"
)

// openAudit opens the audit log's store (--audit-store, else where the
// state store is), unless the audit is off.
func (s *Silo) openAudit(ctx context.Context) error {
	if s.cfg.Audit.Off {
		return nil
	}
	spec := s.cfg.Audit.Store
	if spec == "" {
		spec = s.cfg.StateStore
	}
	st, err := auditstore.Open(ctx, spec, s.etcd.Client(), s.etcd.Prefix())
	if err != nil {
		return err
	}
	s.auditSt = st
	s.audit, err = audit.New(audit.Config{Store: st, Retention: s.cfg.Audit.Retention, Now: s.clk.Now, Logger: s.logger})
	return err
}

// authorizeAudit lets through the callers that hold Audit on
// system:audit (the gateway put the caller in ctx, or, on a gateway
// without authentication, the principal it declared).
func (s *Silo) authorizeAudit(ctx context.Context) error {
	c := acl.CallerFrom(ctx)
	if c == nil {
		var err error
		if c, err = auth.CallerFor(nil, auth.DeclaredPrincipal(ctx)); err != nil {
			return err
		}
	}
	return s.acl.AuthorizeAudit(c)
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
	if err := s.openAudit(ctx); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if s.acl, err = startACL(ctx, s.etcd, s.cfg.ACLFile, s.metrics.denied, s.audit, s.logger); err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	// The declared types are registered before anything serves.
	s.declared = newDeclaredTypes(s.etcd.Client(), s.etcd.Prefix(), s.reg, &s.cfg, s.metrics.llmOption(), llm.WithAudit(s.audit))
	s.declared.audit = s.audit
	declaredRev, err := s.declared.load(ctx)
	if err != nil {
		return fmt.Errorf("declared types: %w", err)
	}
	var lc net.ListenConfig
	var keptGw, keptHTTP *keptListener // the ports a silo program keeps (silo_ports.go)
	if p := s.cfg.ports; p != nil {
		keptGw, keptHTTP = p.gateway, p.http
	}
	if s.gwLis, err = listen(ctx, s.cfg.GatewayAddr, keptGw); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if s.peerLis, err = lc.Listen(ctx, "tcp", s.cfg.PeerAddr); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	if s.cfg.HTTPAddr != "" {
		if s.httpLis, err = listen(ctx, s.cfg.HTTPAddr, keptHTTP); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	if s.sub.a2a.Addr != "" {
		if s.a2aLis, err = lc.Listen(ctx, "tcp", s.sub.a2a.Addr); err != nil {
			return fmt.Errorf("a2a: %w", err)
		}
	}
	if s.sub.mcp.Addr != "" {
		if s.mcpLis, err = lc.Listen(ctx, "tcp", s.sub.mcp.Addr); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	s.hooks = newTestHooks(s.cfg.faultInjection, s.logger)
	s.peerLis = s.hooks.peerListener(s.peerLis)
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
		PeerCAFile:  s.cfg.PeerTLS.CAFile,
	}); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	tcfg := transport.Config{
		Self:           s.cfg.Name,
		Logger:         s.logger,
		MaxMessageSize: s.sub.runtime.MaxMessageSize,
		// A broken stream to a peer whose port refuses connections proves
		// it dead: the membership removes it at once.
		OnPeerState: func(addr string, up bool) {
			if !up {
				s.members.Suspect(addr)
			}
		},
	}
	tcfg.DialOptions = append(tcfg.DialOptions, s.hooks.dialOptions()...)
	if tcfg.TLS, err = s.cfg.PeerTLS.open(); err != nil {
		return err
	}
	tcfg.TLSName = s.cfg.PeerTLS.Name
	if s.tp, err = transport.New(tcfg); err != nil {
		return err
	}
	tracer := tracing.New(s.cfg.TracerProvider)
	s.router = newRouter(s.cfg.Name, s.members, s.tp, tracer, s.clk, s.logger)
	sessions, err := gateway.NewSessions(s.sub.gateway, s.cfg.Name)
	if err != nil {
		return err
	}
	remCfg := reminders.Config{
		Client:    s.etcd.Client(),
		Prefix:    s.etcd.Prefix(),
		MinPeriod: s.cfg.MinReminderPeriod,
		Known:     func(t string) bool { _, ok := s.reg.Lookup(t); return ok },
		View:      s.router.reminderView,
		Fetch:     s.router.fetchReminders,
		Logger:    s.logger,

		ObserveLateness: s.metrics.observeLateness,
	}
	clock.Wire(&remCfg, s.clk)
	if s.reminders, err = reminders.New(ctx, remCfg); err != nil {
		return fmt.Errorf("reminders: %w", err)
	}
	if s.state, err = state.Open(ctx, s.cfg.StateStore, s.etcd.Client(), s.etcd.Prefix()); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	rcfg := s.sub.runtime
	rcfg.State = s.state
	var local siloapi.SessionRouter = sessions
	if s.a2aLis != nil || s.mcpLis != nil {
		// What agents push to an A2A turn's or MCP call's sender reaches it.
		s.inboxes = inbox.New(s.cfg.Name, sessions)
		local = s.inboxes
	}
	keeper := newSessionKeeper(s.router, local, sessions, s.sub.gateway, s.clk, s.logger)
	sessionRt := &sessionRouter{r: s.router, local: local, keep: keeper}
	sessions.SetHome(sessionHome{r: s.router, keep: keeper}, s.logger)
	s.sessions = newSessionsFollowViews(s.router, keeper, sessions, sessionRt)
	rcfg.Configs = etcdstore.NewConfigStore(s.etcd)
	rcfg.Reminders = s.reminders
	if s.topics, err = s.newTopics(ctx); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	rcfg.Topics = s.topics
	info := clusterInfo{r: s.router, declared: s.declared}
	siloapi.Wire(&rcfg, siloapi.Wiring{
		Placement: s.router,
		Sessions:  sessionRt,
		Broadcast: func(ctx context.Context, pattern string, msg *agentsilov1.AgentMessage) (int, error) {
			return info.broadcastPeers(ctx, pattern, msg)
		},
		Clock:  s.clk,
		Tracer: tracer,
		Audit:  s.audit,
	})
	d, err := s.newDirectory(&info)
	if err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	s.dir.Store(d)
	rcfg.Directory = directory.Service{Dir: d, ACL: s.acl}
	// An outside agent held at trust level observe asks no agent.
	s.acl.Refuse(func(principal string) (string, bool) {
		name, ok := d.Observed(principal)
		if !ok {
			return "", false
		}
		return "it is the outside agent " + name + " of the directory, held at trust level observe", true
	})
	if !s.cfg.TrustedAgents {
		rcfg.Authorizer = aclAuthorizer{s.acl}
	}
	if s.rt, err = grain.New(rcfg, s.reg); err != nil {
		return err
	}
	info.rt = s.rt
	s.declared.start(s.rt, declaredRev)
	leaseTTL := s.cfg.LeaseTTL
	if leaseTTL == 0 {
		leaseTTL = membership.DefaultLeaseTTL
	}
	s.views = newViews(s.router, s.rt, remindersFollowViews(s.reminders, leaseTTL, s.clk), topicsFollowViews(s.topics), s.sessions.observe)
	s.router.startReach(leaseTTL, siloapi.Of(s.rt), func() { s.fail(ErrUnreachable) }) // until the membership closes
	s.peerSrv = grpc.NewServer(s.tp.ServerOptions()...)
	s.tp.Register(s.peerSrv, &peerHandler{r: s.router, rt: s.rt, silo: siloapi.Of(s.rt), tracer: tracer, sessions: sessionRt, rem: s.reminders, declared: s.declared})
	gcfg := s.sub.gateway
	gcfg.Cluster = info
	gcfg.Topics = s.topics
	gcfg.Broadcast = info.Broadcast
	gcfg.ACL = s.acl
	gcfg.Audit = s.audit
	gcfg.TracerProvider = s.cfg.TracerProvider
	if s.gw, err = gateway.New(gcfg, s.rt, sessions); err != nil {
		return err
	}
	s.gw.ServeDirectory(d)
	s.gw.RegisterService(&agentsilov1.TypeAdmin_ServiceDesc, &typeAdmin{d: s.declared, acl: s.acl, info: info, rem: s.reminders})
	s.gw.RegisterService(&agentsilov1.Audit_ServiceDesc, &audit.Server{Log: s.audit, Authorize: s.authorizeAudit})
	if s.a2aLis != nil {
		deps := a2a.Deps{Outside: s.dir.outsideAgents, Runtime: s.rt, ACL: s.acl, Audit: s.audit, Etcd: s.etcd.Client(), Prefix: s.etcd.Prefix()}
		inbox.Wire(&deps, s.inboxes)
		if s.a2a, err = a2a.New(s.sub.a2a, deps); err != nil {
			return err
		}
	}
	if s.mcpLis != nil {
		deps := mcp.Deps{Runtime: s.rt, ACL: s.acl, Audit: s.audit}
		inbox.Wire(&deps, s.inboxes)
		if s.mcp, err = mcp.New(s.sub.mcp, deps); err != nil {
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
		if d := s.sub.delegator; d != nil {
			mux.Handle(d.Pattern(), d.Handler()) // the keys of the tokens sent on a user's behalf
			// The token exchange: its clients authenticate as the
			// gateway's do; subject tokens are the provider's or the
			// cluster's own.
			authn, err := auth.New(s.sub.gateway.Auth)
			if err != nil {
				return fmt.Errorf("token endpoint: %w", err)
			}
			mux.Handle(d.TokenPath(), d.ExchangeHandler(authn))
		}
		s.hooks.mount(mux)                            // POST /debug/partition, with fault injection
		if err := s.mountDashboard(mux); err != nil { // /ui (silo_dashboard.go)
			return err
		}
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return nil
}

// gossipConfig adjusts memberlist's configuration: the advertised address,
// and the fault-injecting transport (with the test hooks).
func (s *Silo) gossipConfig(c *memberlist.Config) {
	if s.cfg.AdvertiseAddr != "" {
		c.AdvertiseAddr = s.cfg.AdvertiseAddr
	}
	s.hooks.gossip(c)
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
