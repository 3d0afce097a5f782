package membership

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/names"
)

// DefaultLeaseTTL is the default Config.LeaseTTL: etcd's minimum with its
// default election timeout (1 s). A hung silo is taken over when its lease
// expires (see the package doc), about this long after it hung. A silo
// whose renewals fail for its fence bound (1.73 s) is suspended, not
// fenced, so an etcd leader election, which can take several seconds on a
// loaded host, delays turns and fences nothing: the new leader restarts
// every lease's TTL. What the TTL trades is a silo cut off from a working
// etcd (or hung) for longer than the TTL: its lease expires, and it fences
// and starts again with no activations. On a network that drops a silo's
// etcd traffic for seconds at a time, raise it (--lease-ttl 10s).
const DefaultLeaseTTL = 2 * time.Second

// Clock drift and slack of the fence bound (see LeaseBound and the package
// doc): monotonic clocks that NTP slews run at most 500 ppm off; 1% covers
// them twenty times over, and the fixed slack covers the time between the
// check of the bound and the stop of a turn that starts just before it.
const (
	fenceDriftDivisor = 100 // 1%
	fenceSlack        = 250 * time.Millisecond
)

// LeaseBound returns how long after a successful keepalive was sent a silo
// may go on serving: the lease's TTL ttl (which etcd restarted no earlier
// than the send) less 1% for the rate of this host's clock against the etcd
// leader's and a fixed slack of 250 ms. For the default TTL of 2 s: 1.73 s.
func LeaseBound(ttl time.Duration) time.Duration {
	return ttl - ttl/fenceDriftDivisor - fenceSlack
}

// KeepAliveInterval returns how often a silo with the fence bound fence
// renews its lease while the renewals succeed: a sixth of the bound, at
// most 1 s (288 ms for the default TTL, 1 s for a TTL of 10 s), so that
// an etcd leader election costs a few renewals out of many. A failed
// renewal is retried after a quarter of that.
func KeepAliveInterval(fence time.Duration) time.Duration {
	return min(fence/6, time.Second)
}

// DefaultGossipPort is the gossip port of seeds given without one.
const DefaultGossipPort = 7946

// Config configures New.
type Config struct {
	// Name of the silo (--name), unique in the cluster:
	// [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
	Name string
	// PeerAddr and GatewayAddr are published in the record for other silos
	// and clients.
	PeerAddr    string
	GatewayAddr string
	// GossipAddr is the memberlist bind address, IP:port (--gossip-addr);
	// port 0 picks a free port (the record has the bound one). Default
	// 127.0.0.1:7946.
	GossipAddr string
	// Join seeds (--join): IP:port, or DNS names (with or without a port),
	// each expanded to all its addresses. Default port DefaultGossipPort.
	Join []string
	// Client is the etcd client; Prefix the key prefix (Etcd.Prefix()).
	Client *clientv3.Client
	Prefix string
	// LeaseTTL of the silo's etcd lease, rounded up to whole seconds as etcd
	// counts them. Default DefaultLeaseTTL. etcd may grant more (its minimum
	// TTL); the bounds use what was asked, or less if a keepalive reports
	// less.
	LeaseTTL time.Duration
	// FenceAfter: the silo is suspended (runs no turn until a renewal
	// succeeds) when no keepalive has succeeded for this long. Default, and
	// upper bound: LeaseBound(LeaseTTL), as long as the lease certainly
	// lives after a keepalive (see the package doc). A shorter FenceAfter
	// makes the takeover of a silo removed by detection faster, at the
	// price of suspending on shorter etcd hiccups. Keepalives are sent
	// every KeepAliveInterval(FenceAfter).
	FenceAfter time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// KeyFile, if set, encrypts gossip with the keys of this file
	// (--gossip-key-file; see keyring.go), read again when it changes.
	// Empty: gossip is plaintext and unauthenticated.
	KeyFile string
	// PeerCAFile, if set, is the CA file of the peer port's mutual TLS
	// (--peer-tls-ca): the silo's peers use TLS, and its record carries
	// the fingerprints of the CA certificates (see Security). Empty: the
	// peer port is plain.
	PeerCAFile string
	// Gossip, if set, adjusts the memberlist configuration after the
	// defaults (see gossipConfig) are applied.
	Gossip func(*memberlist.Config)
	// Clock drives keepalives, fencing and the revocation grace. Default:
	// the real clock.
	Clock clock.Clock
	// Resolver expands seed names; default net.DefaultResolver.
	Resolver *net.Resolver
}

func (c *Config) fill() error {
	if !names.Valid(c.Name) {
		return errs.New(codes.InvalidArgument, "membership: bad silo name %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", c.Name)
	}
	if c.Client == nil {
		return errs.New(codes.InvalidArgument, "membership: no etcd client")
	}
	if c.Prefix == "" {
		c.Prefix = "/agentsilo/"
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.GossipAddr == "" {
		c.GossipAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultGossipPort))
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < time.Second {
		return errs.New(codes.InvalidArgument, "membership: lease TTL %v is below 1s", c.LeaseTTL)
	}
	c.LeaseTTL = (c.LeaseTTL + time.Second - 1).Truncate(time.Second)
	if c.FenceAfter == 0 {
		c.FenceAfter = LeaseBound(c.LeaseTTL)
	}
	if c.FenceAfter <= 0 || c.FenceAfter >= c.LeaseTTL {
		return errs.New(codes.InvalidArgument, "membership: FenceAfter %v must be positive and below the lease TTL %v", c.FenceAfter, c.LeaseTTL)
	}
	c.FenceAfter = min(c.FenceAfter, LeaseBound(c.LeaseTTL))
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return nil
}
