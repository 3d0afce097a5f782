package grain

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// Config configures a Runtime. Start from DefaultConfig.
type Config struct {
	// Silo names the silo in ActivationInfo. Default: "local".
	Silo string
	// MailboxSize bounds each activation's mailbox; a sender to a full
	// mailbox waits (bounded by its context). Default: 1000.
	MailboxSize int
	// AskTimeout bounds an Ask whose context has no deadline. Default: 30 s.
	AskTimeout time.Duration
	// IdleTimeout deactivates an activation that had no message for this
	// long. Default: 15 min.
	IdleTimeout time.Duration
	// DeactivateTimeout bounds OnDeactivate. Default: 10 s.
	DeactivateTimeout time.Duration
	// MaxMessageSize bounds a message's encoded size; larger is
	// ResourceExhausted. Default: 4 MiB.
	MaxMessageSize int
	// IdempotencyWindow is how long the runtime remembers the idempotency
	// key of a message it handed to a receiver (see Message.IdempotencyKey
	// and idempotency.go). Default: 10 min.
	IdempotencyWindow time.Duration
	// IdempotencyKeys bounds the keys remembered; past it the oldest are
	// forgotten first. Default: 10000.
	IdempotencyKeys int
	// Configs stores CreateAgent's configurations. Default: an in-memory store.
	Configs ConfigStore
	// Reminders stores and fires durable reminders. Nil: the reminder
	// methods of Host return Unavailable.
	Reminders ReminderService
	// State keeps agents' state (Host.LoadState, SaveState, DeleteState);
	// package state has the etcd and PostgreSQL stores. Nil: those methods
	// return FailedPrecondition.
	State StateStore
	// Topics publishes and keeps subscriptions (Host.Publish, Subscribe,
	// Unsubscribe); package topics implements it. Nil: those methods
	// return Unavailable.
	Topics TopicService
	// Directory answers agents' Host.Directory calls; package directory
	// implements it. Nil: they return Unavailable.
	Directory DirectoryService
	// Authorizer, if set, checks each message an agent sends to another
	// owner's agent against the principal of its call chain (see
	// authorize.go). Nil: agents' messages are not checked (trusted
	// agents).
	Authorizer Authorizer
	// Observer, if set, is told of every message handled or refused, for
	// metrics (see Observer). Nil: nothing is observed.
	Observer Observer
	// Logger receives the runtime's logs. Default: slog.Default().
	Logger *slog.Logger

	// siloSlot holds what a silo wires in with siloapi.Wire (see
	// placement.go): its placement, client sessions, broadcast, clock and
	// tracer; users cannot reach it. Zero: a runtime of its own.
	siloSlot
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		Silo:              "local",
		MailboxSize:       1000,
		AskTimeout:        30 * time.Second,
		IdleTimeout:       15 * time.Minute,
		DeactivateTimeout: 10 * time.Second,
		MaxMessageSize:    protocol.DefaultMaxMessageSize,
		IdempotencyWindow: 10 * time.Minute,
		IdempotencyKeys:   10000,
	}
}

// Validate reports the first invalid field, as InvalidArgument.
func (c *Config) Validate() error {
	switch {
	case c.MailboxSize < 1:
		return errs.New(codes.InvalidArgument, "grain: MailboxSize %d must be at least 1", c.MailboxSize)
	case c.AskTimeout <= 0:
		return errs.New(codes.InvalidArgument, "grain: AskTimeout %v must be positive", c.AskTimeout)
	case c.IdleTimeout <= 0:
		return errs.New(codes.InvalidArgument, "grain: IdleTimeout %v must be positive", c.IdleTimeout)
	case c.DeactivateTimeout <= 0:
		return errs.New(codes.InvalidArgument, "grain: DeactivateTimeout %v must be positive", c.DeactivateTimeout)
	case c.MaxMessageSize < 1024:
		return errs.New(codes.InvalidArgument, "grain: MaxMessageSize %d must be at least 1024", c.MaxMessageSize)
	case c.IdempotencyWindow < 0 || c.IdempotencyKeys < 0:
		return errs.New(codes.InvalidArgument, "grain: IdempotencyWindow and IdempotencyKeys must not be negative")
	}
	if c.IdempotencyWindow == 0 {
		c.IdempotencyWindow = 10 * time.Minute
	}
	if c.IdempotencyKeys == 0 {
		c.IdempotencyKeys = 10000
	}
	return nil
}

// ConfigStore keeps agent configurations written by CreateAgent. Methods are
// called concurrently.
type ConfigStore interface {
	// Get returns the configuration of addr, or nil if none was stored.
	Get(ctx context.Context, addr Address) (map[string]string, error)
	// Put stores the configuration of addr, replacing any earlier one.
	Put(ctx context.Context, addr Address, cfg map[string]string) error
	// Delete removes the configuration of addr, if any.
	Delete(ctx context.Context, addr Address) error
}

// memoryConfigStore is a ConfigStore in memory: the default of a single silo
// without etcd, and the store for tests.
type memoryConfigStore struct {
	mu   sync.RWMutex
	cfgs map[Address]map[string]string
}

// newMemoryConfigStore returns an empty store.
func newMemoryConfigStore() *memoryConfigStore {
	return &memoryConfigStore{cfgs: make(map[Address]map[string]string)}
}

// Get implements ConfigStore.
func (s *memoryConfigStore) Get(_ context.Context, addr Address) (map[string]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return clone(s.cfgs[addr]), nil
}

// Put implements ConfigStore.
func (s *memoryConfigStore) Put(_ context.Context, addr Address, cfg map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfgs[addr] = clone(cfg)
	return nil
}

// Delete implements ConfigStore.
func (s *memoryConfigStore) Delete(_ context.Context, addr Address) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cfgs, addr)
	return nil
}

func clone(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
