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

// Slot is where a silo puts its Wiring in a topics.Config, which embeds a
// Slot under an unexported name, so that users see only their settings and
// cannot reach it, while the silo and tests set it with Wire. Package
// topics takes it with Wired where it fills in its defaults.
type Slot struct {
	w     Wiring
	wired bool
}

// topicSlot is promoted to topics.Config, which embeds a Slot: it makes it
// Slotted, which no type of another package can be otherwise.
func (s *Slot) topicSlot() *Slot { return s }

// Slotted is a pointer to a Config that embeds a Slot (*topics.Config), or
// to the Slot itself.
type Slotted interface{ topicSlot() *Slot }

// Wire puts w in cfg's Slot.
func Wire(cfg Slotted, w Wiring) { *cfg.topicSlot() = Slot{w: w, wired: true} }

// Wired returns the Wiring Wire put in cfg's Slot, and false if Wire was
// not called.
func Wired(cfg Slotted) (Wiring, bool) {
	s := cfg.topicSlot()
	return s.w, s.wired
}

// NewMemory returns an empty store in this process's memory, whose
// idempotency keys last window on clk (nil: the real clock; 0: 10
// minutes): a topics.Service's default (one process, nothing survives it)
// and the twin of the durable stores in tests.
func NewMemory(clk clock.Clock, window time.Duration) *Memory {
	return newMemStore(clk, window)
}

// NewRegistry returns an empty registry (no subscriptions, no versions).
func NewRegistry() *Registry { return newRegistry(nil, nil, nil, nil) }
