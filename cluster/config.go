package cluster

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/gateway"
)

// SiloConfig configures a Silo: what its user decides. What the silo wires
// itself (the runtime's placement, stores and sessions, the gateway's ACL,
// each part's name and logger) is not here: NewSilo makes each part's
// configuration from these settings. Start from DefaultSiloConfig, whose
// body explains each default.
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
	// DashboardAddr, if set, also serves the dashboard (/ui) there over
	// TLS, with the gateway's certificate (Gateway.Auth.TLSCert, needed),
	// asking for client certificates of the gateway's client CA: where a
	// user whose credential is a certificate logs in (--dashboard-addr).
	// Default: empty, none.
	DashboardAddr string
	// OIDCClientID is the dashboard's client at the OpenID provider
	// (Gateway.Auth.OIDC), a public client: users sign in at the provider
	// (the authorization code grant with PKCE), which sends them back to
	// <the dashboard's URL>/ui/login/oidc/callback (--oidc-client-id).
	// Empty: they paste an access token.
	OIDCClientID string
	// Metrics is the Prometheus registry the silo registers its metrics in
	// (see metrics.go) and serves at /metrics. Each silo needs its own: a
	// second silo registering in the same one fails NewSilo. Close takes
	// the silo's metrics out again, so silos that run one after another
	// may share one. Nil: a new registry, with the Go runtime's and the
	// process's metrics too.
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
	// Audit configures the audit log (see package audit): on unless
	// Audit.Off.
	Audit AuditConfig
	// TopicStore says where topics keep subscriptions, queues and dead
	// letters (--topic-store): "" or "etcd" for the silo's etcd, or
	// nats://HOST:PORT (several comma-separated) for NATS JetStream (see
	// docs/jetstream.md), with TopicNATS's credentials, TLS, bucket
	// and replicas.
	TopicStore string
	TopicNATS  TopicNATSConfig
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
	// ACLFile seeds the cluster's ACL in etcd when none is stored yet
	// (--acl-file, JSON: {"Rules": [...], "Groups": {...}}, see
	// docs/security.md). Empty: no seed.
	ACLFile string
	// TrustedAgents turns off the check of agents' messages to other
	// owners' agents (--trusted-agents): an agent may then message any
	// agent, with its own rights lent to whoever made it call. By default
	// such a message is checked against the ACL as the principal that
	// started its call chain (see grain.Authorizer).
	TrustedAgents bool
	// Delegation is the cluster's own signing key, for the tokens it
	// sends on a user's behalf to outside A2A agents (see
	// auth.Delegator): its PEM private key (--delegation-key), the same on
	// every silo, and the issuer URL (--delegation-issuer) at which the
	// silos' HTTP port is reached, where the key is published
	// (ISSUER/.well-known/jwks.json). Both or neither.
	Delegation DelegationConfig
	// Runtime tunes the grain runtime: mailboxes, deadlines, idle
	// collection.
	Runtime RuntimeConfig
	// Topics tunes publish/subscribe (see package topics).
	Topics TopicsConfig
	// Gateway configures the client gateway beyond its address
	// (GatewayAddr): how clients authenticate, and what one client may
	// make it hold.
	Gateway GatewayConfig
	// A2A configures the A2A server (package a2a): every agent as an A2A
	// agent at A2A.Addr (--a2a-addr; empty: off). With it on, the silo
	// registers the agent type A2A (a2a.RemoteType, remote A2A agents as
	// agents) unless the registry has one.
	A2A A2AConfig
	// DirectoryRefresh is how often the service directory fetches an
	// outside entry again, its card or its tools (--directory-refresh;
	// see package directory). Default: 2 min.
	DirectoryRefresh time.Duration
	// MCP configures the MCP server (package mcp): every agent's skills as
	// tools for MCP clients at MCP.Addr (--mcp-addr; empty: off).
	MCP MCPConfig
	// LLM configures the model agents of the types declared without code
	// (package llm; `client types apply`).
	LLM LLMConfig
	// Logger receives the silo's logs; its handler is wrapped with
	// TraceLogHandler. Default: slog.Default().
	Logger *slog.Logger

	// What tests wire in, beside the user's settings: the clock of
	// membership, routing waits, reminders, topics, the directory and the
	// runtime (nil: the real clock), and fault injection (the
	// --fault-injection flag of a build with the agentsilo_testhooks tag,
	// see testhooks.go).
	clock          clock.Clock
	faultInjection bool
	// ports, set by Program, are the gateway and HTTP ports the program
	// keeps across the silos it runs (silo_ports.go): the silo serves
	// them rather than listening itself.
	ports *programPorts
}

// RuntimeConfig tunes the grain runtime of a silo: the settings of
// grain.Config that are its user's (the silo wires the rest).
type RuntimeConfig struct {
	// MailboxSize bounds each activation's mailbox (--mailbox-size); a
	// sender to a full mailbox waits, bounded by its context.
	MailboxSize int
	// AskTimeout bounds an Ask whose context has no deadline
	// (--ask-timeout).
	AskTimeout time.Duration
	// IdleTimeout deactivates an activation that had no message for this
	// long (--idle-timeout).
	IdleTimeout time.Duration
	// DeactivateTimeout bounds OnDeactivate.
	DeactivateTimeout time.Duration
	// MaxMessageSize bounds a message's encoded size, at the runtime, the
	// gateway and between silos (--max-message-size); larger is
	// ResourceExhausted.
	MaxMessageSize int
	// IdempotencyWindow and IdempotencyKeys bound the idempotency keys the
	// runtime remembers (see grain.Config).
	IdempotencyWindow time.Duration
	IdempotencyKeys   int
	// Observer, if set, is told of every message handled or refused,
	// beside the silo's own metrics.
	Observer grain.Observer
	// Logger receives the runtime's logs. Nil: SiloConfig.Logger.
	Logger *slog.Logger
}

// GatewayConfig configures a silo's client gateway: the settings of
// gateway.Config that are its user's (the silo sets its name, address,
// message bound, ACL, topics and tracing).
type GatewayConfig struct {
	// Auth says how clients are authenticated: API keys (--auth-file),
	// TLS and client certificates (--tls-cert, --tls-key, --tls-client-ca).
	Auth auth.Config
	// Insecure lets the gateway alone accept self-declared principals on a
	// non-loopback address; SiloConfig.Insecure does too.
	Insecure bool
	// SessionBacklog bounds the messages queued for one client session
	// that it has not received yet.
	SessionBacklog int
	// SessionBacklogAge is how long a disconnected session is kept, with
	// its backlog, for its client to re-attach.
	SessionBacklogAge time.Duration
	// Limits bound what one client can make the gateway hold
	// (--max-sessions-per-principal, --max-calls-per-principal,
	// --hello-timeout).
	Limits GatewayLimits
	// Logger receives the gateway's logs. Nil: SiloConfig.Logger.
	Logger *slog.Logger
}

// TopicsConfig tunes publish/subscribe: the settings of topics.Config that
// are a silo's user's (the silo gives the store, ownership, clock and
// metrics). Each is described on the topics.Config field of its name; a
// zero field takes topics.DefaultConfig's value.
type TopicsConfig struct {
	MaxBacklog       int           // --topic-backlog
	MaxMessageSize   int           // of a published message
	MaxSubscriptions int           // of one owner
	MaxMembers       int           // of one subscription
	MaxAttempts      int           // --topic-max-attempts
	RetryMin         time.Duration // --topic-retry-min
	RetryMax         time.Duration // --topic-retry-max
	AckTimeout       time.Duration // --topic-ack-timeout
	MaxInflight      int           // deliveries of one subscription
	MaxDeliveryBatch int           // --topic-delivery-batch
	PublishTimeout   time.Duration // of a publish without a deadline
	MaxBatch         int           // publishes in one store append
	MaxAppends       int           // store appends in flight
	QueueSize        int           // publishes waiting for the batcher
	SessionGrace     time.Duration // --topic-session-grace
}

// TopicNATSConfig is how a silo reaches NATS JetStream when TopicStore
// names it.
type TopicNATSConfig struct {
	// CredsFile is a NATS credentials file (--topic-store-creds).
	CredsFile string
	// CAFile, CertFile and KeyFile: TLS to NATS (--topic-store-ca,
	// --topic-store-cert, --topic-store-key).
	CAFile, CertFile, KeyFile string
	// Bucket prefixes the store's buckets (--topic-store-bucket). Empty:
	// agentsilo_topics.
	Bucket string
	// Replicas of each bucket (--topic-store-replicas). Zero: 1.
	Replicas int
}

// A2AConfig configures a silo's A2A server: the settings of a2a.Config
// that are its user's (the silo sets its name, version and logger).
type A2AConfig struct {
	// Addr is the HTTP listen address (--a2a-addr). Empty: no A2A server.
	Addr string
	// DefaultAgent, if set, is the agent (Type:owner:alias) whose card the
	// host root serves instead of the directory card (--a2a-default-agent).
	DefaultAgent string
	// PublicURL is the base URL written in agent cards (--a2a-public-url).
	// Empty: the scheme and Host of each request.
	PublicURL string
	// Auth is how callers are authenticated. Empty: the gateway's
	// (Gateway.Auth).
	Auth auth.Config
	// Insecure lets the server without authentication listen on a
	// non-loopback address; SiloConfig.Insecure does too.
	Insecure bool
	// AllowPrivateNetworks turns off the SSRF guard of what the silo
	// sends out for A2A (--a2a-allow-private-networks): push
	// notifications, the A2A agent type and the service directory's
	// fetches. For development and trusted networks only.
	AllowPrivateNetworks bool
	// LeaseTTL is the TTL of the lease that marks this silo's A2A tasks
	// alive. Zero or a2a's default: LeaseTTL of the silo, if set.
	LeaseTTL time.Duration
	// TaskTimeout bounds one agent turn for A2A (--a2a-task-timeout).
	TaskTimeout time.Duration
	// TaskRetention is how long a finished task stays in etcd
	// (--a2a-task-retention); 0: until deleted there.
	TaskRetention time.Duration
}

// MCPConfig configures a silo's MCP server: the settings of mcp.Config that
// are its user's (the silo sets its name, version and logger).
type MCPConfig struct {
	// Addr is the HTTP listen address (--mcp-addr). Empty: no MCP server.
	Addr string
	// Auth is how callers are authenticated. Empty: the gateway's
	// (Gateway.Auth).
	Auth auth.Config
	// Insecure lets the server without authentication listen on a
	// non-loopback address; SiloConfig.Insecure does too.
	Insecure bool
	// CallTimeout bounds one tool call (--mcp-call-timeout).
	CallTimeout time.Duration
	// SessionTimeout closes an MCP session idle for this long.
	SessionTimeout time.Duration
	// MaxSessions bounds the MCP sessions open at once.
	MaxSessions int
	// AllowPrivateNetworks turns off the SSRF guard of the MCP agent type
	// (agents that call outside MCP servers' tools): servers on loopback,
	// private and link-local addresses are refused without it
	// (--mcp-allow-private-networks). It does not need Addr. For
	// development and trusted networks only.
	AllowPrivateNetworks bool
}

// LLMConfig configures the model agents of a silo's declared types (see
// declared.go): what the silo lets their model calls reach.
type LLMConfig struct {
	// AllowPrivateNetworks turns off the SSRF guard of the model calls of
	// declared types (--llm-allow-private-networks): a model endpoint
	// (model.base_url) on a loopback, private or link-local address is
	// refused without it, with PermissionDenied naming the flag, when a
	// call is made. For local model servers, development and trusted
	// networks.
	AllowPrivateNetworks bool
	// OwnerDailyTokens, if not 0, is the daily token budget of each
	// owner for the model agents of declared types
	// (--llm-owner-daily-tokens): a definition without a budget
	// (limits.owner_daily_tokens) gets it, one with a larger budget is
	// lowered to it. Past it, a turn is refused with ResourceExhausted.
	OwnerDailyTokens int64
}

// DefaultSiloConfig returns a configuration for one silo on this machine,
// reachable on loopback only, with an embedded etcd in ./data.
func DefaultSiloConfig() SiloConfig {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "silo"
	}
	return SiloConfig{
		// The host name: a Kubernetes pod's is stable across restarts in
		// a StatefulSet.
		Name: name,
		// Loopback: a gateway on another address needs authentication or
		// Insecure (see security.go).
		GatewayAddr: "127.0.0.1:7070",
		HTTPAddr:    "127.0.0.1:8080",
		// Long enough for the calls in flight and OnDeactivate (its own
		// bound is Runtime.DeactivateTimeout) to finish.
		ShutdownTimeout: 30 * time.Second,
		// An embedded etcd in ./data on 127.0.0.1:2379, keys under
		// /agentsilo/, compacted every 5 minutes.
		Etcd: etcdstore.DefaultConfig(),
		// Reminders are durable and each costs etcd writes: a minute is
		// their granularity (timers are for shorter periods).
		MinReminderPeriod: time.Minute,
		// Free ports on loopback: a test's silos do not collide. `silo`
		// sets 7071 and 7946.
		PeerAddr:   "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0",
		// An outside agent's card or tools are fetched again this often.
		DirectoryRefresh: 2 * time.Minute,
		Runtime: RuntimeConfig{
			// Room for bursts; a full mailbox slows its senders down.
			MailboxSize: 1000,
			// An Ask without a deadline of its own.
			AskTimeout: 30 * time.Second,
			// An idle activation's memory goes back after 15 minutes; its
			// state (if it keeps any) was saved by the agent.
			IdleTimeout:       15 * time.Minute,
			DeactivateTimeout: 10 * time.Second,
			// gRPC's default bound on a received message.
			MaxMessageSize: 4 << 20,
			// An SDK retrying a call within 10 minutes does not run it
			// twice; 10,000 keys bound the memory that takes.
			IdempotencyWindow: 10 * time.Minute,
			IdempotencyKeys:   10000,
		},
		Gateway: GatewayConfig{
			// A client session detached for up to 2 minutes (a restart,
			// a network blip) finds up to 1000 pushes waiting for it.
			SessionBacklog:    1000,
			SessionBacklogAge: 2 * time.Minute,
			// 100 sessions and 1000 calls in flight per principal, a Hello
			// within 10 s (see GatewayLimits).
			Limits: GatewayLimits(gateway.DefaultLimits()),
		},
		Topics: TopicsConfig{
			// A subscription 1000 messages behind makes publishers wait.
			MaxBacklog: 1000,
			// A published message is stored once per subscription.
			MaxMessageSize:   256 << 10,
			MaxSubscriptions: 1000,
			MaxMembers:       1000,
			// Five deliveries, 1 s doubling to at most 1 min apart, each
			// bounded by 30 s, then a dead letter.
			MaxAttempts: 5,
			RetryMin:    time.Second,
			RetryMax:    time.Minute,
			AckTimeout:  30 * time.Second,
			MaxInflight: 64,
			// Up to 32 due messages delivered to an agent in one request.
			MaxDeliveryBatch: 32,
			// Publishing: 30 s without a deadline, up to 256 publishes an
			// append, 4 appends in flight, 10,000 publishes queued.
			PublishTimeout: 30 * time.Second,
			MaxBatch:       256,
			MaxAppends:     4,
			QueueSize:      10000,
			// As long as a detached session's backlog is kept.
			SessionGrace: 2 * time.Minute,
		},
		A2A: A2AConfig{
			// Off (no Addr). Tasks of a silo dead for 10 s are failed by
			// the others; a turn may take 10 minutes; a finished task is
			// kept for a day.
			LeaseTTL:      10 * time.Second,
			TaskTimeout:   10 * time.Minute,
			TaskRetention: 24 * time.Hour,
		},
		MCP: MCPConfig{
			// Off (no Addr). A tool call may take 10 minutes; a session
			// idle for 10 minutes is closed; 10,000 sessions at once.
			CallTimeout:    10 * time.Minute,
			SessionTimeout: 10 * time.Minute,
			MaxSessions:    10000,
		},
	}
}

// GatewayLimits bound what one client, and one principal, can make the
// gateway hold; past them calls get ResourceExhausted (or the stream ends).
type GatewayLimits struct {
	// HelloTimeout is how long a Session stream may take to send its
	// Hello (--hello-timeout); then it ends with DeadlineExceeded.
	// Default: 10 s.
	HelloTimeout time.Duration
	// MaxSessionsPerPrincipal bounds the sessions of one principal
	// (--max-sessions-per-principal), and, separately, its streams awaiting
	// their Hello. Default: 100.
	MaxSessionsPerPrincipal int
	// MaxCallsPerPrincipal bounds one principal's calls in flight, unary
	// and on sessions (--max-calls-per-principal). Default: 1000.
	MaxCallsPerPrincipal int
	// SessionPending bounds a session stream's calls in flight plus the
	// results it has not written yet. Default: 256.
	SessionPending int
	// SessionPendingBytes bounds the encoded bytes of those calls' messages
	// and results. Default: 8 MiB.
	SessionPendingBytes int
	// SessionBacklogBytes bounds the encoded bytes of the pushes waiting
	// for a session (SessionBacklog bounds their number). Default: 8 MiB.
	SessionBacklogBytes int
	// StallTimeout is how long a session stream over its pending bounds
	// may go without the client reading a frame before the stream ends
	// with ResourceExhausted. Default: 30 s.
	StallTimeout time.Duration
}

// DelegationConfig is SiloConfig.Delegation.
type DelegationConfig struct {
	// Issuer is the tokens' issuer: the URL at which the silos' HTTP port
	// is reached (--delegation-issuer).
	Issuer string
	// KeyFile is the PEM private key (RSA of 2048 bits or more, or ECDSA
	// P-256) that signs them (--delegation-key).
	KeyFile string
}

// AuditConfig configures a silo's audit log (see docs/audit.md).
type AuditConfig struct {
	// Off records nothing (--audit=false); the Audit service then answers
	// FailedPrecondition.
	Off bool
	// Store is where the records are kept (--audit-store): "" for where
	// the state store is (StateStore), "etcd" for the silo's etcd, or a
	// postgres:// URL.
	Store string
	// Retention is how long records are kept (--audit-retention, default
	// audit.DefaultRetention; negative: forever).
	Retention time.Duration
}
