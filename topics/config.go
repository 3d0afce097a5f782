package topics

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// Config configures a Service: every field has a default, described
// beside it. Where the Service keeps subscriptions and queues is not a
// setting: in a silo, etcd or NATS JetStream (see package cluster); else
// this process's memory.
type Config struct {
	// Owns reports whether this silo delivers the messages of subscription
	// id (`owner:name`). It is called often and must be quick; call
	// Service.Rebalance when its answers change. Nil: every subscription
	// (one silo).
	Owns func(id string) bool
	// Known reports whether an agent type is registered; subscribing an
	// agent of an unknown type is NotFound. Nil: every type is known.
	Known func(typeName string) bool
	// MaxBacklog bounds the messages queued for one subscription and not
	// yet acknowledged; past it publishers to its topics wait (see
	// Service.Publish). Default: 1000.
	MaxBacklog int
	// MaxMessageSize bounds a published message's encoded size (a message
	// is stored once per matching subscription); larger is
	// ResourceExhausted. Default: 256 KiB.
	MaxMessageSize int
	// MaxSubscriptions bounds the subscriptions of one owner; Subscribe
	// past it is ResourceExhausted. Default: 1000.
	MaxSubscriptions int
	// MaxMembers bounds the agents of one subscription. Default: 1000.
	MaxMembers int
	// MaxAttempts is a subscription's default bound on deliveries of a
	// message before it becomes a dead letter. Default: 5.
	MaxAttempts int
	// RetryMin and RetryMax bound the backoff between deliveries of a
	// message that failed: RetryMin doubled per failure, capped at
	// RetryMax, with jitter. Default: 1 s and 1 min.
	RetryMin, RetryMax time.Duration
	// AckTimeout bounds one delivery: a handler that has not returned by
	// then counts as failed. Default: 30 s.
	AckTimeout time.Duration
	// MaxInflight bounds the messages of one subscription being delivered
	// at a time (each publisher's go one at a time, or in order in one
	// batch). Default: 64.
	MaxInflight int
	// MaxDeliveryBatch bounds the messages delivered to an agent in one
	// request, those due at once (see grain.BatchHandler); 1 delivers one
	// at a time. Client sessions get one at a time. Default: 32.
	MaxDeliveryBatch int
	// PublishTimeout bounds a publish whose context has no deadline.
	// Default: 30 s.
	PublishTimeout time.Duration
	// MaxBatch bounds the publishes written together, in one append to
	// the store (one etcd transaction, shared with other writes). Default:
	// 256.
	MaxBatch int
	// MaxAppends bounds the appends to the store in flight at once.
	// Default: 4.
	MaxAppends int
	// QueueSize bounds the publishes waiting for the batcher. Default:
	// 10000.
	QueueSize int
	// Observe, if set, is told of publishes and of deliveries' outcomes,
	// for metrics. It is called concurrently and must be quick.
	Observe Observer
	// SessionGrace is how long a subscription whose members all went with
	// their silo's lease (a client session's, its gateway's silo dead) is
	// kept, with its queue, before it is deleted: a session adopted by
	// another gateway within it, whose SDK subscribes again, finds what
	// was published meanwhile. Default: 2 min (a detached session's
	// backlog age).
	SessionGrace time.Duration
	// Logger receives the service's logs. Default: slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of publishes and deliveries of
	// messages that are part of a trace (see tracing.go). Nil:
	// otel.GetTracerProvider(), a no-op unless the program sets one.
	TracerProvider trace.TracerProvider

	// store and clk are the store of subscriptions and queues (nil: one in
	// memory, made by New) and the clock of retries' backoff and of
	// SessionGrace (nil: the real clock). Validate takes them from
	// siloWiring if the silo wired them in (topicstore.Wire); this
	// package's tests set them here.
	store topicstore.Store
	clk   clock.Clock
	// siloWiring holds what the silo gives its Service, which it sets with
	// topicstore.Wire; users cannot reach it.
	siloWiring
}

// siloWiring is the topicstore.Slot embedded in Config, under a name users
// cannot refer to.
type siloWiring = topicstore.Slot

var _ topicstore.Slotted = (*Config)(nil)

// Observer is told what a Service does, for metrics. Its methods are
// called concurrently.
type Observer interface {
	// Published: a message was queued for subs subscriptions.
	Published(subs int)
	// Delivered: a delivery ended with outcome "ack", "retry" (the handler
	// asked for it), "error" (another failure), "unavailable" (retried
	// without counting an attempt) or "poison".
	Delivered(outcome string)
	// DeadLettered: a message became a dead letter.
	DeadLettered()
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		MaxBacklog:       1000,
		MaxMessageSize:   256 << 10,
		MaxAttempts:      5,
		MaxSubscriptions: 1000,
		MaxMembers:       1000,
		RetryMin:         time.Second,
		RetryMax:         time.Minute,
		AckTimeout:       30 * time.Second,
		MaxInflight:      64,
		MaxDeliveryBatch: 32,
		PublishTimeout:   30 * time.Second,
		MaxBatch:         256,
		MaxAppends:       4,
		QueueSize:        10000,
		SessionGrace:     2 * time.Minute,
	}
}

// MaxAttemptsLimit is the largest max attempts a subscription may have.
const MaxAttemptsLimit = 100

// Validate fills in defaults for zero fields and reports the first invalid
// one, as InvalidArgument.
func (c *Config) Validate() error {
	d := DefaultConfig()
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fillD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&c.MaxBacklog, d.MaxBacklog)
	fill(&c.MaxMessageSize, d.MaxMessageSize)
	fill(&c.MaxAttempts, d.MaxAttempts)
	fill(&c.MaxSubscriptions, d.MaxSubscriptions)
	fill(&c.MaxMembers, d.MaxMembers)
	fill(&c.MaxInflight, d.MaxInflight)
	fill(&c.MaxDeliveryBatch, d.MaxDeliveryBatch)
	fill(&c.MaxBatch, d.MaxBatch)
	fill(&c.QueueSize, d.QueueSize)
	fill(&c.MaxAppends, d.MaxAppends)
	fillD(&c.RetryMin, d.RetryMin)
	fillD(&c.RetryMax, d.RetryMax)
	fillD(&c.AckTimeout, d.AckTimeout)
	fillD(&c.PublishTimeout, d.PublishTimeout)
	fillD(&c.SessionGrace, d.SessionGrace)
	if w, ok := topicstore.Wired(&c.siloWiring); ok {
		c.store, c.clk = w.Store, w.Clock
	}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.MaxSubscriptions < 1, c.MaxMembers < 1:
		return errs.New(codes.InvalidArgument, "topics: MaxSubscriptions and MaxMembers must be positive")
	case c.MaxBacklog < 1, c.MaxMessageSize < 1, c.MaxInflight < 1, c.MaxDeliveryBatch < 1, c.MaxBatch < 1, c.QueueSize < 1, c.MaxAppends < 1:
		return errs.New(codes.InvalidArgument, "topics: sizes and bounds must be positive")
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsLimit:
		return errs.New(codes.InvalidArgument, "topics: MaxAttempts %d: want 1 to %d", c.MaxAttempts, MaxAttemptsLimit)
	case c.RetryMin < 0, c.RetryMax < c.RetryMin, c.AckTimeout < 0, c.PublishTimeout < 0:
		return errs.New(codes.InvalidArgument, "topics: durations must be positive, RetryMax at least RetryMin")
	}
	return nil
}

// Deliver delivers one message of a subscription to one of its agents and
// returns what the handler answered: the silo passes its runtime's Ask.
type Deliver func(ctx context.Context, msg *grain.Message) (*grain.Message, error)
