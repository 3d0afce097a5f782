package grain

// This file is the runtime's one adapter to protoactor-go; no other file of
// package grain imports it (tests/layout_test.go checks).
//
// What the runtime takes from protoactor's actor package: the actor process
// (a PID in the actor system's process registry, spawned and stopped through
// the root context) and the actor context that invokes it: protoactor's
// MessageInvoker runs the system messages (Started, Stop, Stopping, Stopped)
// and each user message through the actor's Receive, and handles a panic
// escaping the mailbox run (EscalateFailure). The runtime plugs its own
// Mailbox and Dispatcher into protoactor's hooks for them (Props'
// WithMailbox and WithDispatcher).
//
// What the runtime does itself, and why:
//
//   - the directory of activations (directory.go), one per address, with the
//     hand-off of a deactivating activation's queued messages to the next
//     one, and the cluster's placement hand-off (Placement's Claim and Hold):
//     protoactor's cluster package would bring its own identity lookup and
//     membership, where agentsilo's live in etcd and memberlist;
//   - turn-based execution with call-chain reentrancy (turn.go): requests of
//     the call chain a turn waits on enter at once; protoactor's reentrancy
//     (ReenterAfter) is per future, not per call chain;
//   - the bounded mailbox with backpressure (mailbox.go): a sender to a full
//     mailbox waits under its context; protoactor's mailboxes are unbounded,
//     or bounded by dropping;
//   - the dispatcher (dispatcher.go), which keeps grown goroutine stacks
//     parked instead of a goroutine per mailbox run;
//   - errors with gRPC codes, contexts on every call, idle collection and
//     timers on a replaceable Clock, and reminders: protoactor's grain API
//     takes no context and its cluster start panics (see STYLE.md).
//
// Keeping protoactor behind this file keeps its types out of the runtime's
// code and leaves the engine replaceable in one place.

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// process is an activation's protoactor process.
type process = *actor.PID

// messageInvoker runs a mailbox's messages: protoactor's actor context.
type messageInvoker = actor.MessageInvoker

var (
	_ actor.Actor      = (*activation)(nil)
	_ actor.Mailbox    = (*mailbox)(nil)
	_ actor.Dispatcher = (*dispatcher)(nil)
)

// engine is the protoactor actor system of a runtime, with the one Props
// every activation is spawned with.
type engine struct {
	system *actor.ActorSystem
	props  *actor.Props
	// spawnMu hands the activation being spawned to the shared Props'
	// producers, so that no Props is allocated per activation.
	spawnMu  sync.Mutex
	spawning *activation
	seq      atomic.Uint64
}

// newEngine starts an actor system that logs its warnings to logger and runs
// mailboxes on d.
func newEngine(logger *slog.Logger, d *dispatcher) *engine {
	e := &engine{}
	e.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		// protoactor logs routine events at Info; keep only its warnings.
		return slog.New(warnOnly{logger.Handler()}).With("lib", "protoactor")
	}))
	e.props = actor.PropsFromProducer(
		func() actor.Actor { return e.spawning },
		actor.WithMailbox(func() actor.Mailbox { return &e.spawning.mb }),
		actor.WithDispatcher(d),
	)
	return e
}

// spawn makes a's protoactor process, with a.mb as its mailbox. The spawn
// only allocates and registers; a's mailbox is held, so nothing is
// scheduled while spawnMu is held.
func (e *engine) spawn(a *activation) (process, error) {
	e.spawnMu.Lock()
	defer e.spawnMu.Unlock()
	e.spawning = a
	defer func() { e.spawning = nil }()
	return e.system.Root.SpawnNamed(e.props, strconv.FormatUint(e.seq.Add(1), 36))
}

// stop stops a process and removes it from the process registry.
func (e *engine) stop(p process) { e.system.Root.Stop(p) }

// shutdown stops the actor system.
func (e *engine) shutdown() { e.system.Shutdown() }

// Receive implements actor.Actor. It runs on the mailbox's goroutine, for
// the runtime's messages and protoactor's lifecycle messages (ignored).
func (a *activation) Receive(c actor.Context) { a.receive(c.Message()) }

// RegisterHandlers implements actor.Mailbox.
// The dispatcher is always the runtime's own (newEngine's Props).
func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, d actor.Dispatcher) {
	m.invoker = invoker
	m.dispatcher, _ = d.(*dispatcher) // nil (never run) cannot happen: newEngine's Props set it
}

// warnOnly drops records below Warn.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }
func (h warnOnly) WithGroup(g string) slog.Handler       { return warnOnly{h.Handler.WithGroup(g)} }
