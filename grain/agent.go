package grain

import (
	"context"
	"log/slog"
	"time"
)

// Agent is the one method every agent type implements. The runtime calls it
// for REQUEST and ONE_WAY messages, one message at a time per activation:
// OnMessage never runs concurrently with itself or with the other callbacks of
// the same activation (except for requests of the call chain the activation is
// waiting on in Ask; see Host.Ask).
//
// For a REQUEST, the returned message is the reply (build it with
// msg.Response(); a nil reply is an empty RESPONSE). A returned error fails the
// call with the error's gRPC code (see package errs), Unknown for a plain
// error. For a ONE_WAY message the reply is discarded.
//
// ctx carries the caller's deadline for requests and is cancelled when the
// caller stops waiting.
type Agent interface {
	OnMessage(ctx context.Context, msg *Message) (*Message, error)
}

// Activator is implemented by agents that want to run code when activated,
// before their first message. An error fails the
// message that caused the activation, and the activation is discarded.
type Activator interface {
	OnActivate(ctx context.Context) error
}

// EventHandler is implemented by agents that take events (Host.Event). Agents
// that do not implement it ignore events.
type EventHandler interface {
	OnEvent(ctx context.Context, msg *Message) error
}

// Deactivator is implemented by agents that want to run code when their
// activation ends. It runs in turn, after the last message.
type Deactivator interface {
	OnDeactivate(ctx context.Context, reason Reason)
}

// Reason says why an activation ends.
type Reason int

const (
	// ReasonIdle: no message for the idle timeout.
	ReasonIdle Reason = iota + 1
	// ReasonShutdown: the silo is shutting down.
	ReasonShutdown
	// ReasonPanic: a handler panicked; the next message re-creates the agent.
	ReasonPanic
	// ReasonRequested: the agent or the runtime asked for it (Host.Deactivate).
	ReasonRequested
	// ReasonMoved: the cluster moved the address to another silo.
	ReasonMoved
)

func (r Reason) String() string {
	switch r {
	case ReasonIdle:
		return "idle"
	case ReasonShutdown:
		return "shutdown"
	case ReasonPanic:
		return "panic"
	case ReasonRequested:
		return "requested"
	case ReasonMoved:
		return "moved"
	}
	return "unknown"
}

// Host is what an activation gets from the runtime: its identity and the ways
// to reach other agents. Ask, Send, Event, Broadcast, Config, the reminder
// and the state methods may be called from any goroutine; RegisterTimer, StopTimer and
// Deactivate only from the activation's own turn.
type Host interface {
	// Address is the activation's own address.
	Address() Address
	// Owner is the owner part of Address; relative addresses resolve to it.
	Owner() string
	// Silo names the silo that hosts this activation (Config.Silo).
	Silo() string
	// Serving reports whether this silo may act for the agent now: false
	// while the silo is suspended (its membership unconfirmed for a while:
	// etcd not answering), and for good once it may have lost its place in
	// the cluster, so that another silo may host the agent. A turn already
	// running when the process was paused can go on after it resumes; an
	// agent whose side effects must not overlap checks Serving just before
	// each one, after taking any timestamp or token it writes (a fencing
	// token checked by the external system is the only complete
	// protection), or calls WaitServing.
	Serving() bool
	// WaitServing returns nil at once while Serving is true; while the silo
	// is suspended it waits until the silo serves again (nil) or may have
	// lost its place (Unavailable), bounded by ctx.
	WaitServing(ctx context.Context) error

	// Ask sends a REQUEST to the agent at `to` and waits for its reply, up to
	// ctx's deadline or the default Ask timeout (30 s). Called with the ctx of
	// a turn, the request joins that turn's call chain, and requests of the
	// same chain may enter this activation while it waits (so A asks B, B asks
	// A completes instead of deadlocking); other messages wait their turn.
	// What Ask, Send, Event and Broadcast send is on behalf of the turn's
	// principal (msg.OnBehalfOf is set by the runtime): to another owner's
	// agent it needs that principal's Message permission (PermissionDenied
	// otherwise; see Authorizer).
	Ask(ctx context.Context, to string, msg *Message) (*Message, error)
	// Send delivers a ONE_WAY message. It returns once the message is queued
	// (waiting for room in a full mailbox, bounded by ctx).
	Send(ctx context.Context, to string, msg *Message) error
	// Event delivers an EVENT, handled by the target's OnEvent.
	Event(ctx context.Context, to string, msg *Message) error
	// Broadcast sends msg (an EVENT if its kind is KIND_EVENT, else ONE_WAY)
	// to every active agent whose address matches the glob pattern (path.Match
	// syntax, e.g. "Worker:acme:*"), except the sender and the agents of
	// other owners that the call chain's principal may not message (see
	// Authorizer), on every silo of the cluster, and returns how many it
	// reached. Agents that are not active are not activated. With an error
	// it returns how many it reached.
	Broadcast(ctx context.Context, pattern string, msg *Message) (int, error)

	// RegisterTimer delivers a ONE_WAY message of messageType with text
	// message to this activation after due, then every period (0: once). A
	// timer lives in memory until stopped or until the activation ends; a tick
	// is skipped while the previous one is still queued. Registering an
	// existing name replaces it.
	RegisterTimer(name string, due, period time.Duration, messageType, message string) error
	// StopTimer stops the named timer and reports whether it existed.
	StopTimer(name string) bool
	// Deactivate ends this activation after the current turn.
	Deactivate()

	// RegisterReminder creates or replaces a durable reminder (see Reminder):
	// its first tick is due after due (0: at once), then every period. The
	// period must be at least the silo's minimum (--min-reminder-period,
	// 1 min by default); a negative due is InvalidArgument.
	RegisterReminder(ctx context.Context, name string, due, period time.Duration, messageType, message string) error
	// UnregisterReminder removes a reminder of this agent.
	UnregisterReminder(ctx context.Context, name string) error
	// Reminders lists this agent's reminders.
	Reminders(ctx context.Context) ([]Reminder, error)

	// Authorize returns nil if principal holds the ACL permission named
	// permission (such as "Approve") on this agent: the agent's owner
	// always does; others as the silo's ACL says (PermissionDenied if it
	// says no, or if the silo has none). For an agent that guards one of
	// its own skills with a permission other than Message, which the
	// runtime checks for every message.
	Authorize(ctx context.Context, principal, permission string) error

	// Config returns the configuration stored by CreateAgent for this agent
	// (nil if it was never created), read when first asked for.
	Config(ctx context.Context) (map[string]string, error)

	// LoadState reads this agent's state from the silo's state store (see
	// StateStore): its bytes and etag, or nil and "" if it has none.
	LoadState(ctx context.Context) (data []byte, etag string, err error)
	// SaveState writes this agent's state if the stored version is still the
	// one etag names ("": there must be none yet) and returns the new etag.
	// A stale etag is ErrConflict (Aborted): load again and retry. A save
	// that meets a store failure leaving its outcome unknown (an etcd
	// leader change, a lost connection) is made again while ctx allows
	// (10 s without a deadline): the etag condition, and the idempotency
	// key in a keyed turn, make that safe and tell whether the first
	// landed. If it stays unknown (Unavailable, DeadlineExceeded), the
	// next save or delete first reads the stored state back: if the lost
	// write did land, the etag the agent holds is taken as the one it made;
	// if it did not, the call is ErrConflict unless it writes the very same
	// bytes (the agent's value may hold the change that was not stored:
	// load and apply it again); if another writer came in between, the
	// call is ErrConflict. See LoadJSON and State for JSON-encoded values.
	SaveState(ctx context.Context, data []byte, etag string) (newETag string, err error)
	// DeleteState removes this agent's state if the stored version is the
	// one etag names (ErrConflict if not). Deleting absent state with etag
	// "" succeeds.
	DeleteState(ctx context.Context, etag string) error
	// Logger returns a logger that names the agent.
	Logger() *slog.Logger

	// Publish publishes msg to topic (`owner:name`, or a dot-separated
	// name of this agent's owner, e.g. "orders.created") and returns once
	// it is durable, with the message's id: it is then delivered at least
	// once to every subscription whose pattern matches. A subscription's
	// full backlog makes it wait, bounded by ctx (then ResourceExhausted).
	// msg.IdempotencyKey, if set, makes a retried publish a no-op within
	// the window (10 min).
	Publish(ctx context.Context, topic string, msg *Message) (id string, err error)
	// Subscribe adds this agent to its owner's subscription name, creating
	// it with pattern (`owner:pattern` or a pattern of this agent's owner's
	// topics; `*` is one segment, `#` zero or more) if it does not exist.
	// Everything published after Subscribe returns is delivered: as a
	// REQUEST to OnMessage with msg.Topic set and msg.Attempt counting
	// deliveries. The handler's nil error acknowledges; Retry and Poison
	// (and any other error, retried with backoff) say otherwise. Several
	// agents in one subscription compete for its messages; the
	// subscription outlives deactivations and restarts.
	Subscribe(ctx context.Context, name, pattern string, opts ...SubscribeOption) error
	// Unsubscribe removes this agent from its owner's subscription name;
	// the last member's leaving deletes the subscription.
	Unsubscribe(ctx context.Context, name string) error

	// Directory is the service directory: the cluster's agent types,
	// outside A2A agents and MCP servers, to search and list (see
	// Directory). Its calls are Unavailable on a runtime without one.
	Directory() Directory
}

// Factory creates the agent for a new activation. It must not block and
// should have no side effects: when first messages for one address race, the
// factory may run for a spare that is discarded before it activates. Do
// set-up in OnActivate, which runs once per activation.
type Factory func(host Host) (Agent, error)
