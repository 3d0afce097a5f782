package cluster

import (
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/topics"
)

// subConfigs are the configurations of a silo's parts, made by NewSilo from
// its SiloConfig: the user's settings, and what the silo fills from its own
// (each part's silo name, address, logger, message bound). What the parts
// are given once they exist (the runtime's placement and stores, the
// gateway's ACL and cluster view, the topics' store) is set in build.
type subConfigs struct {
	runtime grain.Config
	gateway gateway.Config
	topics  topics.Config
	a2a     a2a.Config
	mcp     mcp.Config
	// delegator signs the tokens sent on a user's behalf (nil: none).
	delegator *auth.Delegator
}

// newSubConfigs makes and checks the parts' configurations from cfg, whose
// Logger is set.
func newSubConfigs(cfg *SiloConfig) (subConfigs, error) {
	var sc subConfigs
	r := cfg.Runtime
	sc.runtime = grain.DefaultConfig()
	sc.runtime.Silo = cfg.Name
	sc.runtime.MailboxSize, sc.runtime.AskTimeout, sc.runtime.IdleTimeout = r.MailboxSize, r.AskTimeout, r.IdleTimeout
	sc.runtime.DeactivateTimeout, sc.runtime.MaxMessageSize = r.DeactivateTimeout, r.MaxMessageSize
	sc.runtime.IdempotencyWindow, sc.runtime.IdempotencyKeys = r.IdempotencyWindow, r.IdempotencyKeys
	sc.runtime.Observer, sc.runtime.Logger = r.Observer, traceLogger(orLogger(r.Logger, cfg.Logger))
	if err := sc.runtime.Validate(); err != nil {
		return sc, err
	}

	g := cfg.Gateway
	sc.gateway = gateway.DefaultConfig()
	sc.gateway.Silo, sc.gateway.Addr = cfg.Name, cfg.GatewayAddr
	sc.gateway.MaxMessageSize = sc.runtime.MaxMessageSize
	sc.gateway.Auth, sc.gateway.Insecure = g.Auth, g.Insecure || cfg.Insecure
	sc.gateway.SessionBacklog, sc.gateway.SessionBacklogAge, sc.gateway.Limits = g.SessionBacklog, g.SessionBacklogAge, gateway.Limits(g.Limits)
	sc.gateway.Logger = traceLogger(orLogger(g.Logger, cfg.Logger))
	if err := sc.gateway.Validate(); err != nil {
		return sc, err
	}

	t := cfg.Topics
	sc.topics = topics.Config{
		MaxBacklog: t.MaxBacklog, MaxMessageSize: t.MaxMessageSize, MaxSubscriptions: t.MaxSubscriptions, MaxMembers: t.MaxMembers,
		MaxAttempts: t.MaxAttempts, RetryMin: t.RetryMin, RetryMax: t.RetryMax, AckTimeout: t.AckTimeout, MaxInflight: t.MaxInflight,
		MaxDeliveryBatch: t.MaxDeliveryBatch, PublishTimeout: t.PublishTimeout, MaxBatch: t.MaxBatch, MaxAppends: t.MaxAppends, QueueSize: t.QueueSize, SessionGrace: t.SessionGrace,
	}

	if d := cfg.Delegation; d.Issuer != "" || d.KeyFile != "" {
		if d.Issuer == "" || d.KeyFile == "" {
			return sc, errs.New(codes.InvalidArgument, "cluster: --delegation-key and --delegation-issuer go together")
		}
		if cfg.HTTPAddr == "" {
			return sc, errs.New(codes.InvalidArgument, "cluster: --delegation-key publishes its key on the HTTP port: give --http-addr")
		}
		var err error
		if sc.delegator, err = auth.NewDelegator(d.Issuer, d.KeyFile); err != nil {
			return sc, err
		}
	}
	if cfg.A2A.Addr != "" {
		var err error
		if sc.a2a, err = a2aConfig(cfg, sc.gateway.Auth); err != nil {
			return sc, err
		}
	}
	if cfg.MCP.Addr != "" {
		var err error
		if sc.mcp, err = mcpConfig(cfg, sc.gateway.Auth); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// a2aConfig is the A2A server's configuration: its name is the silo's,
// its authentication the gateway's unless set, and its lease the
// membership's unless set.
func a2aConfig(cfg *SiloConfig, gwAuth auth.Config) (a2a.Config, error) {
	u := cfg.A2A
	c := a2a.DefaultConfig()
	c.Addr, c.PublicURL, c.AllowPrivateNetworks = u.Addr, u.PublicURL, u.AllowPrivateNetworks
	c.TaskTimeout, c.TaskRetention = u.TaskTimeout, u.TaskRetention
	c.DefaultAgent = u.DefaultAgent
	c.Silo, c.Version, c.Logger = cfg.Name, Version(), cfg.Logger
	c.Auth = u.Auth
	if !authSet(c.Auth) {
		c.Auth = gwAuth
	}
	c.Insecure = u.Insecure || cfg.Insecure
	if u.LeaseTTL != 0 && u.LeaseTTL != c.LeaseTTL {
		c.LeaseTTL = u.LeaseTTL
	} else if cfg.LeaseTTL > 0 {
		c.LeaseTTL = cfg.LeaseTTL // --lease-ttl: the same liveness for both
	}
	if err := c.Validate(); err != nil {
		return c, errs.Wrap(codes.InvalidArgument, err, "cluster")
	}
	return c, nil
}

// mcpConfig is the MCP server's configuration: its name is the silo's and
// its authentication the gateway's unless set.
func mcpConfig(cfg *SiloConfig, gwAuth auth.Config) (mcp.Config, error) {
	u := cfg.MCP
	c := mcp.DefaultConfig()
	c.Addr, c.CallTimeout, c.SessionTimeout, c.MaxSessions = u.Addr, u.CallTimeout, u.SessionTimeout, u.MaxSessions
	c.Silo, c.Version, c.Logger = cfg.Name, Version(), cfg.Logger
	c.Auth = u.Auth
	if !authSet(c.Auth) {
		c.Auth = gwAuth
	}
	c.Insecure = u.Insecure || cfg.Insecure
	if err := c.Validate(); err != nil {
		return c, errs.Wrap(codes.InvalidArgument, err, "cluster")
	}
	return c, nil
}

// authSet reports whether a says anything of its own.
func authSet(a auth.Config) bool {
	return a.KeyFile != "" || len(a.Keys) > 0 || a.TLSCert != "" || a.TLSClientCA != "" || a.OIDC.Enabled()
}

func orLogger(l, def *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return def
}
