package reminders

import (
	"context"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// Config configures a Service. Client is required; every other
// field has a default, described beside it.
type Config struct {
	// Client reaches etcd. The Service does not close it.
	Client *clientv3.Client
	// Prefix is the silo's etcd key prefix (--etcd-prefix); reminders live
	// under Prefix + "reminders/". Default: "/agentsilo/".
	Prefix string
	// MinPeriod is the shortest period Register accepts
	// (--min-reminder-period). Default: 1 min.
	MinPeriod time.Duration
	// MaxPayload bounds len(MessageType)+len(Message) of a reminder; larger
	// is ResourceExhausted. Default: 64 KiB.
	MaxPayload int
	// Known reports whether an agent type is registered; Register of a
	// reminder of an unknown type is NotFound. Nil: every type is known.
	Known func(typeName string) bool
	// View returns the cluster's view in force: which buckets this silo
	// owns (holds, and fires the reminders of). It is called from the
	// Service's goroutines, with no lock of the Service held, and must be
	// quick. Nil: this silo owns every bucket (a single silo). Call
	// Service.Rebalance when it changes.
	View func() View
	// Deliver delivers a tick: a ONE_WAY message from the agent to itself,
	// which activates the agent if needed (a silo passes Runtime.Send). It is
	// called concurrently, by at most Concurrency goroutines. Nil: nothing
	// fires until Service.Start gives it (for a silo that creates its
	// runtime after the Service, since the runtime takes the Service).
	Deliver func(ctx context.Context, msg *grain.Message) error
	// Fetch, if set, asks the silo that held bucket b before this one took
	// it over for what that silo's Export returns, so that a bucket moving
	// between silos that are both up (a graceful leave, a join) is read
	// from the old owner's memory instead of etcd. Any error and the
	// bucket is read from etcd (NotFound quietly: no silo to ask). Nil:
	// always etcd.
	Fetch func(ctx context.Context, b int) ([]byte, error)
	// Concurrency bounds the deliveries in flight. Default: 64.
	Concurrency int
	// DeliverTimeout bounds one delivery (a full mailbox makes Deliver
	// wait). Default: 30 s.
	DeliverTimeout time.Duration
	// OpTimeout bounds each etcd request of Register, Unregister and List,
	// so that a lost etcd answers Unavailable instead of hanging. Default: 5 s.
	OpTimeout time.Duration
	// PageSize is the number of reminders read per request while loading.
	// Default: 1000.
	PageSize int
	// ObserveLateness, if set, is called for every tick fired, with how
	// late it fires after its due time (for metrics). It is called from the
	// scheduler's goroutine with the service's lock held: it must be quick.
	ObserveLateness func(late time.Duration)
	// Logger receives the service's logs. Default: slog.Default().
	Logger *slog.Logger

	// clk is the scheduler's time (nil: the real clock). Validate takes it
	// from siloClock if the silo wired one in (clock.Wire); this package's
	// tests set it here.
	clk clock.Clock
	// siloClock holds the silo's clock (a fake one in its tests), which it
	// sets with clock.Wire; users cannot reach it.
	siloClock
}

// siloClock is the clock.Slot embedded in Config, under a name users cannot
// refer to.
type siloClock = clock.Slot

var _ clock.Slotted = (*Config)(nil)

// DefaultConfig returns the defaults described on Config's fields (without
// Client and Deliver).
func DefaultConfig() Config {
	return Config{
		Prefix:         "/agentsilo/",
		MinPeriod:      time.Minute,
		MaxPayload:     64 << 10,
		Concurrency:    64,
		DeliverTimeout: 30 * time.Second,
		OpTimeout:      5 * time.Second,
		PageSize:       1000,
	}
}

// Validate fills in defaults for zero fields and reports the first invalid
// one, as InvalidArgument.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.MinPeriod == 0 {
		c.MinPeriod = d.MinPeriod
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = d.MaxPayload
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.DeliverTimeout == 0 {
		c.DeliverTimeout = d.DeliverTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = d.OpTimeout
	}
	if c.PageSize == 0 {
		c.PageSize = d.PageSize
	}
	if clk := clock.Wired(&c.siloClock); clk != nil {
		c.clk = clk
	}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Client == nil:
		return errs.New(codes.InvalidArgument, "reminders: Config.Client is nil")
	case c.MinPeriod < 0:
		return errs.New(codes.InvalidArgument, "reminders: MinPeriod %v is negative", c.MinPeriod)
	case c.MaxPayload < 0:
		return errs.New(codes.InvalidArgument, "reminders: MaxPayload %d is negative", c.MaxPayload)
	case c.Concurrency < 1:
		return errs.New(codes.InvalidArgument, "reminders: Concurrency %d must be at least 1", c.Concurrency)
	case c.DeliverTimeout < 0, c.OpTimeout < 0:
		return errs.New(codes.InvalidArgument, "reminders: timeouts must be positive")
	case c.PageSize < 1:
		return errs.New(codes.InvalidArgument, "reminders: PageSize %d must be at least 1", c.PageSize)
	}
	return nil
}
