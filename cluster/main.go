package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/tracing"
)

// Main runs a silo program serving the agent types of reg, as `silo` does,
// and exits: every flag of `silo` (see Program), the SILO_* environment,
// logging, metrics, graceful shutdown on SIGTERM or SIGINT, and the exit
// codes (0 after a clean shutdown, 2 for a usage or configuration error, 1
// for a failure). A fenced silo does not exit: it is torn down without
// running OnDeactivate and started again under a new lease. The program
// keeps its gateway and HTTP ports open for its whole run: while no silo
// serves them (before the first has joined, after a fence) /healthz
// answers 200, /readyz 503 saying why, /metrics serves, and gateway calls
// fail with Unavailable saying why. A program of one's own agent types
// is ten lines:
//
//	func main() {
//		reg := grain.NewRegistry()
//		if err := reg.Register("Greeter", newGreeter); err != nil {
//			log.Fatal(err)
//		}
//		cluster.Main(reg)
//	}
func Main(reg *grain.Registry) {
	os.Exit(Program{Registry: reg}.Run(os.Args[1:], os.Stdout, os.Stderr))
}

// Program is a silo program: what Main runs, with room for a program's own
// flags and steps. cmd/silo is one (its --demo flag registers the demo
// agents and calls them once the silo serves).
type Program struct {
	// Name is the program's name in its usage line. Default: "silo".
	Name string
	// Registry holds the agent types the silo serves. Required.
	Registry *grain.Registry
	// Flags, if set, defines the program's own flags on fs, beside the
	// silo's; they are read from SILO_* too.
	Flags func(fs *flag.FlagSet)
	// BeforeStart, if set, runs once the flags are parsed and before the
	// silo is made: it may register agent types and adjust cfg. An error
	// is a configuration error (exit code 2).
	BeforeStart func(cfg *SiloConfig, reg *grain.Registry) error
	// AfterStart, if set, runs once the first silo serves (not again after
	// a fence), on the main goroutine;
	// ctx ends at SIGTERM or SIGINT. An error is logged; the silo goes on.
	AfterStart func(ctx context.Context, s *Silo) error
}

// Run runs the program with args (without the program name), writing usage
// and logs to stderr and what the program prints to stdout, and returns its
// exit code.
func (p Program) Run(args []string, stdout, stderr io.Writer) int {
	if p.Name == "" {
		p.Name = "silo"
	}
	if p.Registry == nil {
		fmt.Fprintln(stderr, "error: cluster.Program: no Registry")
		return 2
	}
	cfg, logger, showVersion, err := p.parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	if tp, ok := cfg.TracerProvider.(interface{ Shutdown(context.Context) error }); ok {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				logger.Warn("spans not all exported", "err", err)
			}
		}()
	}
	if showVersion {
		fmt.Fprintf(stdout, "%s %s\n", p.Name, Version())
		return 0
	}
	if p.BeforeStart != nil {
		if err := p.BeforeStart(&cfg, p.Registry); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// A fenced silo is torn down as a crash would end it (its activations
	// run no OnDeactivate: another silo may own them already) and a new one
	// starts in its place, under a new lease, as soon as etcd answers and
	// the old record is gone: the cluster recovers from a long etcd outage
	// without a supervisor. The silos share the program's registry, and
	// the gateway and HTTP ports, which the program keeps open throughout:
	// while no silo serves them, a stand-in says why (silo_ports.go).
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
		if err := registerRuntimeCollectors(cfg.Metrics); err != nil {
			logger.Error("silo failed to start", "err", fmt.Errorf("metrics: %w", err))
			return 1
		}
	}
	var ports *programPorts
	defer func() {
		if ports != nil {
			ports.close()
		}
	}()
	restart := retry.Restart.New(nil) // the pauses between failed starts of a fenced silo
	rejoin := retry.Rejoin.New(nil)   // the pauses before a silo the others could not reach starts again
	for incarnation := 0; ; incarnation++ {
		s, err := NewSilo(cfg, p.Registry)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 2
		}
		if ports == nil {
			if ports, err = keepPorts(ctx, &s.cfg, s.sub.gateway, cfg.Metrics); err != nil {
				logger.Error("silo failed to start", "err", err)
				return 1
			}
			ports.standIn("starting: joining the cluster", false)
			cfg.ports, s.cfg.ports = ports, ports
		}
		if err := s.Start(ctx); err != nil {
			if incarnation == 0 || ctx.Err() != nil || errors.Is(err, membership.ErrSecurityMismatch) {
				// A refusal of this silo's security settings (its peer TLS
				// or gossip key files changed since it first joined) does
				// not heal by trying again: it is said once, and the
				// program exits.
				logger.Error("silo failed to start", "err", err)
				return 1
			}
			logger.Warn("silo failed to start again after fencing; retrying", "err", err)
			ports.startFailed(err)
			if !restart.Wait(ctx, nil) {
				return 1
			}
			continue
		}
		restart.Reset()
		ports.served()
		logger.Info("silo serving", "name", cfg.Name, "version", Version(), "gateway", s.GatewayAddr(), "http", s.HTTPAddr(), "a2a", s.A2AAddr(), "mcp", s.MCPAddr(), "types", strings.Join(p.Registry.Names(), ","), "incarnation", incarnation)
		if p.AfterStart != nil && incarnation == 0 {
			if err := p.AfterStart(ctx, s); err != nil {
				logger.Error("after start", "err", err)
			}
		}

		var runErr error
		select {
		case <-ctx.Done():
			logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
		case runErr = <-s.Err():
			logger.Error("silo failed", "err", runErr)
		}
		if errors.Is(runErr, ErrUnreachable) && ctx.Err() == nil {
			// Drained: its agents run elsewhere already. It leaves the
			// cluster, pauses and joins again as a new member, which the
			// others probe again; each time it is found unreachable again,
			// the pause doubles, up to a minute.
			ports.standIn("unreachable: the other silos could not reach this silo's peer port; it drained, and starts again after a pause", false)
			sctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
			err := s.Close(sctx)
			cancel()
			if err != nil {
				logger.Warn("closing the silo the others could not reach", "err", err)
			}
			logger.Info("starting the silo again after a pause: the others could not reach its peer port")
			if !rejoin.Wait(ctx, nil) {
				logger.Info("silo stopped")
				return 0
			}
			continue
		}
		if errors.Is(runErr, ErrFenced) && ctx.Err() == nil {
			// Fenced: Close runs no OnDeactivate and does not leave. The
			// stand-in answers on the ports from now on.
			ports.standIn(fenceReason(s.members.FenceCause())+"; starting again under a new lease", true)
			sctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
			err := s.Close(sctx)
			cancel()
			if err != nil {
				logger.Warn("tearing down the fenced silo", "err", err)
			}
			logger.Info("starting the silo again under a new lease after fencing")
			continue
		}
		stop()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		err = s.Close(sctx)
		cancel()
		if err != nil {
			logger.Error("shutdown", "err", err)
			return 1
		}
		logger.Info("silo stopped")
		if runErr != nil {
			return 1
		}
		return 0
	}
}

// parseFlags reads the flags, with SILO_* environment variables as
// defaults.
func (p Program) parseFlags(args []string, stderr io.Writer) (SiloConfig, *slog.Logger, bool, error) {
	cfg := DefaultSiloConfig()
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Name, "name", cfg.Name, "silo name (default: the host name)")
	fs.StringVar(&cfg.GatewayAddr, "gateway-addr", cfg.GatewayAddr, "client gateway listen address (gRPC, with health and reflection)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address for /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&cfg.OIDCClientID, "oidc-client-id", cfg.OIDCClientID, "the dashboard's client at the --oidc-issuer (public, PKCE): users sign in there, and come back to <dashboard URL>/ui/login/oidc/callback")
	fs.StringVar(&cfg.DashboardAddr, "dashboard-addr", cfg.DashboardAddr, "also serve the dashboard here over TLS (needs --tls-cert), where client certificates log in (empty: off)")
	fs.BoolVar(&cfg.Insecure, "insecure", cfg.Insecure, "accept self-declared principals on a non-loopback gateway address, and serve non-loopback peer and gossip addresses without mutual TLS and a gossip key")
	cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:7071", "127.0.0.1:7946"
	fs.StringVar(&cfg.PeerAddr, "peer-addr", cfg.PeerAddr, "silo-to-silo transport listen address (gRPC)")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "gossip (memberlist) bind address, IP:port, UDP and TCP")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "IP that other silos and clients reach this silo at (default: the listen addresses' hosts)")
	fs.StringVar(&cfg.PeerTLS.CertFile, "peer-tls-cert", "", "the silo's certificate (PEM) for mutual TLS with the other silos; it must name the silo (--name) or --peer-tls-name")
	fs.StringVar(&cfg.PeerTLS.KeyFile, "peer-tls-key", "", "the key (PEM) of --peer-tls-cert")
	fs.StringVar(&cfg.PeerTLS.CAFile, "peer-tls-ca", "", "CA certificates (PEM) that sign the silos' certificates")
	fs.StringVar(&cfg.PeerTLS.Name, "peer-tls-name", "", "a name the silos' certificates may carry instead of each silo's own (one certificate shared by every silo)")
	fs.StringVar(&cfg.GossipKeyFile, "gossip-key-file", "", "file of base64 gossip keys (16, 24 or 32 bytes), one a line, the first used to encrypt; re-read when it changes")
	join := fs.String("join", "", "comma-separated gossip seeds, host:port or DNS names expanded to all their addresses")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", membership.DefaultLeaseTTL, "membership lease TTL in etcd (whole seconds): a hung silo is taken over about this long after it hung; a silo whose renewals fail for the TTL less 1% and 250 ms is suspended (its turns wait) until one succeeds, and fences and starts again under a new lease if its lease expired")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated endpoints of an external etcd (empty: run an embedded etcd in --data-dir)")
	fs.StringVar(&cfg.Etcd.DataDir, "data-dir", cfg.Etcd.DataDir, "data directory of the embedded etcd")
	fs.StringVar(&cfg.Etcd.EmbeddedAddr, "embedded-etcd-addr", cfg.Etcd.EmbeddedAddr, "client address of the embedded etcd, for further local silos' --etcd-endpoints")
	fs.StringVar(&cfg.Etcd.Prefix, "etcd-prefix", cfg.Etcd.Prefix, "prefix of every etcd key")
	fs.DurationVar(&cfg.Etcd.CompactInterval, "etcd-compact-interval", cfg.Etcd.CompactInterval, "compact etcd's history this often, up to the revision of one interval before (0: never)")
	fs.StringVar(&cfg.Etcd.CAFile, "etcd-ca", "", "CA certificates (PEM) that verify the external etcd's certificate: TLS to etcd")
	fs.StringVar(&cfg.Etcd.CertFile, "etcd-cert", "", "client certificate (PEM) for an etcd that requires one (TLS)")
	fs.StringVar(&cfg.Etcd.KeyFile, "etcd-key", "", "the key (PEM) of --etcd-cert")
	fs.StringVar(&cfg.Etcd.Username, "etcd-user", "", "etcd user, for an etcd with auth enabled; the password comes from SILO_ETCD_PASSWORD or --etcd-password-file")
	etcdPasswordFile := fs.String("etcd-password-file", "", "file holding the password of --etcd-user (one trailing newline is dropped)")
	fs.StringVar(&cfg.StateStore, "state-store", cfg.StateStore, "where agents' state is kept: etcd (the silo's), or a postgres:// URL (prefer SILO_STATE_STORE for a URL with a password)")
	auditOn := fs.Bool("audit", true, "record every side-effecting action in the audit log (see docs/audit.md)")
	fs.StringVar(&cfg.Audit.Store, "audit-store", cfg.Audit.Store, "where the audit log is kept: etcd (the silo's), or a postgres:// URL; default: where --state-store keeps state")
	fs.DurationVar(&cfg.Audit.Retention, "audit-retention", cfg.Audit.Retention, "how long audit records are kept (0: a year; negative: forever)")
	fs.StringVar(&cfg.TopicStore, "topic-store", cfg.TopicStore, "where topics keep subscriptions and queues: etcd (the silo's), or nats://HOST:PORT for NATS JetStream, several comma-separated (prefer SILO_TOPIC_STORE for a URL with a password)")
	fs.StringVar(&cfg.TopicNATS.CredsFile, "topic-store-creds", "", "NATS credentials file (a user JWT and its NKey seed) for --topic-store")
	fs.StringVar(&cfg.TopicNATS.CAFile, "topic-store-ca", "", "CA certificates (PEM) that verify the NATS server's certificate: TLS to NATS")
	fs.StringVar(&cfg.TopicNATS.CertFile, "topic-store-cert", "", "client certificate (PEM) for a NATS server that requires one (mutual TLS)")
	fs.StringVar(&cfg.TopicNATS.KeyFile, "topic-store-key", "", "the key (PEM) of --topic-store-cert")
	fs.StringVar(&cfg.TopicNATS.Bucket, "topic-store-bucket", "agentsilo_topics", "prefix of the JetStream key-value buckets of --topic-store (letters, digits, - and _)")
	fs.IntVar(&cfg.TopicNATS.Replicas, "topic-store-replicas", 1, "replicas of each JetStream bucket of --topic-store, in a JetStream cluster")
	fs.DurationVar(&cfg.MinReminderPeriod, "min-reminder-period", cfg.MinReminderPeriod, "shortest reminder period accepted (lower only for tests)")
	fs.DurationVar(&cfg.Runtime.IdleTimeout, "idle-timeout", cfg.Runtime.IdleTimeout, "deactivate an agent after this long without messages")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "bound on graceful shutdown")
	fs.IntVar(&cfg.Runtime.MailboxSize, "mailbox-size", cfg.Runtime.MailboxSize, "bound of each agent's mailbox")
	fs.IntVar(&cfg.Runtime.MaxMessageSize, "max-message-size", cfg.Runtime.MaxMessageSize, "largest message in bytes")
	fs.DurationVar(&cfg.Runtime.AskTimeout, "ask-timeout", cfg.Runtime.AskTimeout, "default Ask deadline")
	fs.IntVar(&cfg.Topics.MaxBacklog, "topic-backlog", cfg.Topics.MaxBacklog, "messages a subscription may have queued and unacknowledged before publishers wait")
	fs.IntVar(&cfg.Topics.MaxAttempts, "topic-max-attempts", cfg.Topics.MaxAttempts, "deliveries of a message before it becomes a dead letter, for subscriptions that do not set theirs")
	fs.DurationVar(&cfg.Topics.RetryMin, "topic-retry-min", cfg.Topics.RetryMin, "first wait before a failed delivery is retried (doubling per failure)")
	fs.DurationVar(&cfg.Topics.RetryMax, "topic-retry-max", cfg.Topics.RetryMax, "longest wait before a failed delivery is retried")
	fs.IntVar(&cfg.Topics.MaxDeliveryBatch, "topic-delivery-batch", cfg.Topics.MaxDeliveryBatch, "most messages of a subscription handed to an agent in one turn (to its batch handler; 1: one at a time)")
	fs.DurationVar(&cfg.Topics.AckTimeout, "topic-ack-timeout", cfg.Topics.AckTimeout, "bound on one delivery: a handler still running then counts as failed")
	fs.DurationVar(&cfg.Topics.SessionGrace, "topic-session-grace", cfg.Topics.SessionGrace, "how long a client session's subscription outlives its gateway's silo, with its queue, for the session adopted elsewhere to subscribe again")
	// Security: the ACL's seed, and how the gateway authenticates clients.
	fs.StringVar(&cfg.ACLFile, "acl-file", cfg.ACLFile, "ACL JSON document ({\"Rules\": [...], \"Groups\": {...}}) stored in etcd when no ACL is there yet")
	fs.BoolVar(&cfg.TrustedAgents, "trusted-agents", cfg.TrustedAgents, "do not check agents' messages to other owners' agents against the principal of their call chain (an agent then lends its rights to whoever makes it call)")
	fs.StringVar(&cfg.Gateway.Auth.KeyFile, "auth-file", cfg.Gateway.Auth.KeyFile, "API-key file: {\"keys\": [{\"sha256\": HEX, \"principal\": P, \"groups\": [...]}]}")
	fs.StringVar(&cfg.Gateway.Auth.TLSCert, "tls-cert", cfg.Gateway.Auth.TLSCert, "gateway TLS certificate file (PEM)")
	fs.StringVar(&cfg.Gateway.Auth.TLSKey, "tls-key", cfg.Gateway.Auth.TLSKey, "gateway TLS key file (PEM)")
	fs.StringVar(&cfg.Gateway.Auth.TLSClientCA, "tls-client-ca", cfg.Gateway.Auth.TLSClientCA, "CA file for client certificates (mutual TLS; principal = subject CN, else first DNS name)")
	fs.StringVar(&cfg.Gateway.Auth.OIDC.Issuer, "oidc-issuer", cfg.Gateway.Auth.OIDC.Issuer, "issuer URL of an OpenID provider whose bearer tokens (\"authorization: Bearer TOKEN\") prove callers on the gateway, A2A, MCP and the dashboard")
	fs.StringVar(&cfg.Gateway.Auth.OIDC.Audience, "oidc-audience", cfg.Gateway.Auth.OIDC.Audience, "audience the provider's tokens must be for (their aud); required with --oidc-issuer")
	fs.StringVar(&cfg.Gateway.Auth.OIDC.PrincipalClaim, "oidc-principal-claim", "sub", "token claim that is the caller's principal")
	fs.StringVar(&cfg.Gateway.Auth.OIDC.GroupsClaim, "oidc-groups-claim", "groups", "token claim that lists the caller's groups (for the ACL's group rules)")
	fs.StringVar(&cfg.Delegation.KeyFile, "delegation-key", cfg.Delegation.KeyFile, "PEM private key (RSA, or ECDSA P-256; the same on every silo) signing the tokens sent on a user's behalf to outside A2A agents and MCP servers configured with delegate=true, and those of the token exchange at ISSUER/token")
	fs.StringVar(&cfg.Delegation.Issuer, "delegation-issuer", cfg.Delegation.Issuer, "issuer URL of those tokens: where the silos' HTTP port is reached, which publishes the key at ISSUER/.well-known/jwks.json")
	fs.BoolVar(&cfg.Gateway.Auth.OIDC.AllowHTTP, "oidc-allow-http", cfg.Gateway.Auth.OIDC.AllowHTTP, "accept an --oidc-issuer on plain HTTP at an address that is not loopback")
	// Limits: what one client, and one principal, can make the gateway hold.
	fs.IntVar(&cfg.Gateway.Limits.MaxSessionsPerPrincipal, "max-sessions-per-principal", cfg.Gateway.Limits.MaxSessionsPerPrincipal, "client sessions one principal may hold (past it, a new one replaces its session detached longest, or is refused)")
	fs.IntVar(&cfg.Gateway.Limits.MaxCallsPerPrincipal, "max-calls-per-principal", cfg.Gateway.Limits.MaxCallsPerPrincipal, "calls one principal may have in flight through the gateway (past it: ResourceExhausted)")
	fs.DurationVar(&cfg.Gateway.Limits.HelloTimeout, "hello-timeout", cfg.Gateway.Limits.HelloTimeout, "a session stream that sends no Hello within this is closed")
	// A2A: every agent as an A2A agent (package a2a).
	fs.StringVar(&cfg.A2A.Addr, "a2a-addr", cfg.A2A.Addr, "A2A listen address (HTTP; HTTPS with --tls-cert), empty: off")
	fs.StringVar(&cfg.A2A.PublicURL, "a2a-public-url", cfg.A2A.PublicURL, "base URL written in agent cards (default: the scheme and host of each request)")
	fs.StringVar(&cfg.A2A.DefaultAgent, "a2a-default-agent", cfg.A2A.DefaultAgent, "agent Type:owner:alias whose card the host root serves, so a client given only the host calls it (default: the directory card)")
	fs.DurationVar(&cfg.A2A.TaskTimeout, "a2a-task-timeout", cfg.A2A.TaskTimeout, "bound of one agent turn for A2A")
	fs.DurationVar(&cfg.A2A.TaskRetention, "a2a-task-retention", cfg.A2A.TaskRetention, "how long a finished A2A task (completed, failed, canceled, rejected) and its push configs stay in etcd; 0: until deleted there")
	fs.BoolVar(&cfg.A2A.AllowPrivateNetworks, "a2a-allow-private-networks", cfg.A2A.AllowPrivateNetworks, "let push notifications and the A2A agent type reach loopback and private addresses (off: SSRF guard)")
	fs.DurationVar(&cfg.DirectoryRefresh, "directory-refresh", 2*time.Minute, "how often the service directory fetches an outside A2A agent's card or MCP server's tools again (one silo per entry, with jitter)")
	// MCP: every agent's skills as tools for MCP clients (package mcp).
	fs.StringVar(&cfg.MCP.Addr, "mcp-addr", cfg.MCP.Addr, "MCP listen address (streamable HTTP at /mcp; HTTPS with --tls-cert), empty: off")
	fs.DurationVar(&cfg.MCP.CallTimeout, "mcp-call-timeout", cfg.MCP.CallTimeout, "bound of one MCP tool call (the agent's turn)")
	fs.BoolVar(&cfg.MCP.AllowPrivateNetworks, "mcp-allow-private-networks", cfg.MCP.AllowPrivateNetworks, "let the MCP agent type reach MCP servers on loopback and private addresses (off: SSRF guard; --a2a-allow-private-networks does not lift it)")
	// Declared types: model agents declared without code (package llm).
	fs.Int64Var(&cfg.LLM.OwnerDailyTokens, "llm-owner-daily-tokens", cfg.LLM.OwnerDailyTokens, "the most tokens (input and output) the model agents of declared types spend per owner in a UTC day, counted across silos; a definition's own limits.owner_daily_tokens is lowered to it (0: the definitions' own)")
	fs.BoolVar(&cfg.LLM.AllowPrivateNetworks, "llm-allow-private-networks", cfg.LLM.AllowPrivateNetworks, "let the model agents of declared types (client types apply) call model endpoints on loopback and private addresses (off: SSRF guard)")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export spans to this OTLP/gRPC receiver: http://HOST:4317 (plain) or https://HOST:4317 (TLS); empty: as the standard OTEL_EXPORTER_OTLP_* environment says, else no export")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	version := fs.Bool("version", false, "print the version and exit")
	testFlags(fs, &cfg) // none in the production build (testhooks_off.go)
	if p.Flags != nil {
		p.Flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\nEvery flag may also be set as SILO_<NAME> in the environment.\n\n", p.Name)
		fs.PrintDefaults()
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "SILO_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, nil, false, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, nil, false, err
	}
	if fs.NArg() > 0 {
		return cfg, nil, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *endpoints != "" {
		cfg.Etcd.Endpoints = strings.Split(*endpoints, ",")
	}
	// The password is never a flag, so that it shows in no process list.
	cfg.Etcd.Password = os.Getenv("SILO_ETCD_PASSWORD")
	if *etcdPasswordFile != "" {
		b, err := os.ReadFile(*etcdPasswordFile)
		if err != nil {
			return cfg, nil, false, fmt.Errorf("--etcd-password-file: %w", err)
		}
		cfg.Etcd.Password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	}
	cfg.Audit.Off = !*auditOn
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return cfg, nil, false, err
	}
	cfg.Logger = logger
	otlp := tracing.OTLPConfig{Endpoint: *otlpEndpoint, Instance: cfg.Name}
	if tp, err := tracing.StartOTLP(context.Background(), otlp); err != nil {
		return cfg, nil, false, err
	} else if tp != nil {
		cfg.TracerProvider = tp // shut down by Run, flushing its spans
		logger.Info("exporting spans over OTLP", "endpoint", tracing.DescribeOTLP(otlp))
	}
	return cfg, logger, *version, nil
}

// newLogger returns the logger of a silo program: text or JSON (format) to
// w, at level (debug, info, warn or error). Durations are written as Go
// durations ("1.5s"), in JSON too, where slog would write nanoseconds.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// Version is agentsilo's version as the running binary records it: the
// module version (a tag, or a pseudo-version; "(devel)" when built from a
// checkout), with the VCS revision when there is one.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := ""
	const mod = "github.com/agentsilo/agentsilo"
	if bi.Main.Path == mod {
		v = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			v = d.Version
			if d.Replace != nil {
				v += " (replaced by " + d.Replace.Path + ")"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v + " " + bi.GoVersion
}
