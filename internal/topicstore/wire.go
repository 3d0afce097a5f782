package topicstore

import (
	"time"

	"github.com/agentsilo/agentsilo/internal/clock"
)

// Wiring is what a silo gives its topics.Service besides the settings of
// topics.Config: where the subscriptions and queues are kept, and the clock
// of retries and grace periods. Tests wire a fake clock the same way.
type Wiring struct {
	// Store keeps the subscriptions and queues. Nil: a store in memory.
	Store Store
	// Clock: nil is the real clock.
	Clock clock.Clock
}

// Wire sets w on cfg, a *topics.Config. Package topics sets it at init, so
// that its Config shows only the user's settings.
var Wire func(cfg any, w Wiring)

// NewMemory returns an empty store in this process's memory, whose
// idempotency keys last window on clk (nil: the real clock; 0: 10
// minutes): a topics.Service's default (one process, nothing survives it)
// and the twin of the durable stores in tests.
func NewMemory(clk clock.Clock, window time.Duration) *Memory {
	return newMemStore(clk, window)
}

// NewRegistry returns an empty registry (no subscriptions, no versions).
func NewRegistry() *Registry { return newRegistry(nil, nil, nil, nil) }
