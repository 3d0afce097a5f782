// Package siloapi is the part of the grain runtime that only the silo uses:
// what a silo wires into its runtime (Wiring: the Placement of addresses
// across silos, the SessionRouter of client sessions, the cluster-wide
// broadcast, the clock), running messages that another silo forwarded, and
// giving activations up when ownership moves (Runtime). It is kept out of
// grain's public API, so that agents and SDK users see only what they may
// call; package grain implements it and keeps what a silo wires in (Slot,
// Handle), package cluster uses it (Wire, Of).
package siloapi

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Wiring is what a silo gives its runtime beside grain.Config. Set it with
// Wire before grain.New.
type Wiring struct {
	// Placement places addresses across a cluster's silos. Nil: every
	// address is hosted here.
	Placement Placement
	// Sessions delivers messages addressed to client sessions
	// (`Session:owner:id`). Nil: such messages are NotFound.
	Sessions SessionRouter
	// Broadcast, if set, takes a Host.Broadcast to the other silos of a
	// cluster (the agents of this silo are reached by the runtime) and
	// returns how many agents it reached there. Nil: a broadcast reaches
	// this silo's agents only.
	Broadcast func(ctx context.Context, pattern string, msg *agentsilov1.AgentMessage) (int, error)
	// Clock is the time of idle collection, timers and activation times
	// (Ask deadlines and latencies are measured on the real clock). Tests
	// give a fake one. Nil: the real clock.
	Clock clock.Clock
	// Tracer, if set, makes the spans of agents' turns and of the messages
	// they send. Nil: none (messages still carry their traceparent).
	Tracer Tracer
	// Audit is the silo's audit log: model agents whose type was given no
	// log of its own (llm.WithAudit), registered in code as declared,
	// record in it, reaching it through their Host (Audited). Nil: the
	// audit is off.
	Audit *audit.Log
}

// Audited is what a Host of a runtime a silo wired implements: the silo's
// audit log (Wiring.Audit, nil if none).
type Audited interface {
	SiloAudit() *audit.Log
}

// Tracer makes the spans of agents' work; package cluster implements it
// with OpenTelemetry, which grain does not import. The runtime calls it
// only for messages that are part of a trace (a traceparent in the
// message, or in the turn it is sent from), so that untraced messages cost
// nothing. Methods are called concurrently, from turns and senders.
type Tracer interface {
	// Call starts the client span of msg, a REQUEST, ONE_WAY or EVENT an
	// agent sends from a turn whose context is ctx, as a child of msg's
	// traceparent (else of ctx's span, else of parent, the turn's), and
	// returns ctx with it, the traceparent msg carries from now on, and
	// the function that ends the span with the call's outcome.
	Call(ctx context.Context, msg SpanInfo, parent string) (context.Context, string, func(error))
	// Turn starts the server span of the turn of agent that handles msg,
	// as a child of msg's traceparent, and returns ctx with it and the
	// function that ends it with the handler's outcome.
	Turn(ctx context.Context, agent string, msg SpanInfo) (context.Context, func(error))
	// Traceparent returns the W3C traceparent of ctx's span, "" if none.
	Traceparent(ctx context.Context) string
}

// SpanInfo is what a span says of its message.
type SpanInfo struct {
	Kind                  agentsilov1.Kind
	From, To, MessageType string
	// Traceparent is the W3C trace context the message carries, "" if
	// none.
	Traceparent string
}

// Slot is where a silo puts its Wiring in a grain.Config, which embeds a
// Slot under an unexported name, so that agents and SDK users see only
// their settings and cannot reach it, while the silo and tests set it with
// Wire. grain.New takes it with Wired.
type Slot struct{ w Wiring }

// siloSlot is promoted to grain.Config, which embeds a Slot: it makes it
// Slotted, which no type of another package can be otherwise.
func (s *Slot) siloSlot() *Slot { return s }

// Slotted is a pointer to a Config that embeds a Slot (*grain.Config), or
// to the Slot itself.
type Slotted interface{ siloSlot() *Slot }

// Wire puts w in cfg's Slot, before grain.New.
func Wire(cfg Slotted, w Wiring) { cfg.siloSlot().w = w }

// Wired returns the Wiring Wire put in cfg's Slot (zero if none).
func Wired(cfg Slotted) Wiring { return cfg.siloSlot().w }

// Placement places addresses across the silos of a cluster. A runtime
// without one hosts every address itself; package cluster implements it.
//
// The runtime asks Route for every message to an agent (not for client
// sessions, which Wiring.Sessions routes). An address routed here is
// activated only after Claim returned; messages routed elsewhere go to
// Forward. Methods are called concurrently.
type Placement interface {
	// Route returns "" if key (a canonical address) is owned by this silo
	// under its current view, else the name of the silo that owns it. It is
	// called on every message and must be cheap.
	Route(key string) string
	// Claim is called before key is activated here. It returns once no other
	// silo can hold a live activation of key (it may wait, bounded by ctx,
	// for a handover or for a dead owner to be certainly fenced), with
	// commit, which the runtime calls as soon as the new activation is in its
	// directory: until then the placement must not change its view, so that
	// a view change that moves key away sees the activation and deactivates
	// it. If key is no longer owned here, Claim returns ErrMoved and the
	// runtime routes the message again.
	Claim(ctx context.Context, key string) (commit func(), err error)
	// Hold reports whether key is still owned here, and keeps the view from
	// changing until release is called. The runtime uses it to re-activate
	// at once, without Claim, an address whose activation has just ended
	// with messages still queued.
	Hold(key string) (owned bool, release func())
	// Forward delivers msg, a REQUEST, ONE_WAY or EVENT already stamped by
	// the runtime, to silo, and returns the reply of a REQUEST. hops counts
	// the silos msg has passed through before this one (0 for a message
	// that started here). A REQUEST that Forward certainly did not deliver,
	// and whose address a newer view moved away from silo, returns
	// ErrMoved: the runtime routes it again.
	Forward(ctx context.Context, silo string, msg *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error)
	// Serving reports whether this silo may run turns at all. It turns
	// false for good once the silo may have lost its place in the cluster
	// (another silo may be taking its addresses over): from then on no
	// turn, timer or OnDeactivate runs. Called before every turn: cheap.
	Serving() bool
}

// ServingWaiter is implemented by a Placement whose silo can be suspended:
// not Serving for a while, then Serving again. WaitServing returns nil when
// the silo serves, an error once it no longer may (for good), or ctx's
// error. Turns that find such a silo not serving wait on it instead of
// failing at once.
type ServingWaiter interface {
	WaitServing(ctx context.Context) error
}

// SessionRouter delivers messages to client sessions. The gateway implements
// it. DeliverToSession is called concurrently, from any goroutine, and must
// not block for long: a session that is briefly disconnected keeps what it
// is sent.
type SessionRouter interface {
	DeliverToSession(ctx context.Context, msg *agentsilov1.AgentMessage) error
}

// ErrMoved is returned by Placement.Claim (and Forward) when the address is
// no longer owned by this silo: the runtime routes the message again.
var ErrMoved = errs.New(codes.Unavailable, "address moved to another silo")

// Runtime is a grain runtime seen from its silo. Methods are safe for
// concurrent use.
type Runtime interface {
	// AskRemote runs a REQUEST another silo forwarded here after hops hops.
	AskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error)
	// SendRemote delivers a ONE_WAY message or EVENT another silo
	// forwarded here.
	SendRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) error
	// AskRemoteAsync is AskRemote that returns once the request is queued
	// at its activation (or forwarded on), and calls done with the result,
	// once: the transport calls it in the sender's order.
	AskRemoteAsync(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, done func(*agentsilov1.AgentMessage, error))
	// TryAskRemote is AskRemote without a goroutine waiting for the reply,
	// for a live activation only; false if it did nothing. owned says the
	// sender routed msg with this silo's current view (which makes this
	// silo msg.To's owner): the Placement is not asked again.
	TryAskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, owned bool, done func(*agentsilov1.AgentMessage, error)) bool
	// Rehome deactivates, after their current turn, the activations whose
	// address keep rejects (the view moved them away).
	Rehome(ctx context.Context, keep func(key string) bool) error
	// Release deactivates the activation of key, if any, and returns once
	// it has ended.
	Release(ctx context.Context, key string) error
}

// Handle holds the silo-only API of a grain.Runtime, which embeds a Handle
// under an unexported name: grain.New puts the API there (Bind) and the
// silo takes it (Of); users cannot reach it.
type Handle struct{ rt Runtime }

// siloHandle is promoted to grain.Runtime, which embeds a Handle: it makes
// it Handled, which no type of another package can be otherwise.
func (h *Handle) siloHandle() *Handle { return h }

// Handled is a pointer to a Runtime that embeds a Handle (*grain.Runtime),
// or to the Handle itself.
type Handled interface{ siloHandle() *Handle }

// Bind puts api, the silo-only API of rt, in rt's Handle. grain.New calls
// it.
func Bind(rt Handled, api Runtime) { rt.siloHandle().rt = api }

// Of returns the silo-only API of rt, a runtime made by grain.New.
func Of(rt Handled) Runtime { return rt.siloHandle().rt }
