package grain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// envelope carries one application message through a mailbox.
type envelope struct {
	msg   *Message
	ctx   context.Context // the sender's, for requests: deadline and cancellation
	reply chan result     // buffered; nil unless msg is a REQUEST (or done is set)
	// done, if set, takes a REQUEST's result, in its wire form, instead of
	// reply (see Runtime.tryAskRemote); it is called once, from the
	// activation's goroutine or the runtime's.
	done func(*agentsilov1.AgentMessage, error)
	// For a request whose ctx has neither deadline nor Done: the default
	// deadline, from the runtime's shared deadlines.
	expired  <-chan struct{}
	deadline time.Time
	now      int64  // when the request was sent (Unix ns); stamps the reply's id
	replyID  string // if set, the reply's id (made with the request's: newIDPair)
	// idem, if set, is the idempotency key this envelope's message was the
	// first to bring (see idempotency.go): its result is recorded there.
	idem *idemEntry
	// turn, if set, is where handle makes the message's turn: allocated
	// with the envelope (see remoteRequest), one allocation less.
	turn *turn
}

// remoteRequest is the envelope of a request another silo forwarded, its
// turn and the bytes of its reply's id, in one allocation (see
// Runtime.tryAskRemote).
type remoteRequest struct {
	env envelope
	t   turn
	id  [36]byte // env.replyID's bytes: written once, before that string is made
}

// envelopes recycles the envelopes (and reply channels) of requests whose
// reply was received; see release.
var envelopes = sync.Pool{New: func() any { return &envelope{reply: make(chan result, 1)} }}

// isRequest reports whether env waits for a result.
func (env *envelope) isRequest() bool { return env.reply != nil || env.done != nil }

// complete gives a request its result.
func (env *envelope) complete(r result) {
	if env.idem != nil {
		r = env.idem.finish(r)
	}
	if env.done != nil {
		env.done(toWire(r.msg), r.err)
		return
	}
	env.reply <- r
}

// release returns a request's envelope to the pool. Call it only once nothing
// else can touch env: the reply was received, or env was never queued.
func (env *envelope) release() {
	reply := env.reply
	*env = envelope{reply: reply}
	envelopes.Put(env)
}

type result struct {
	msg *Message
	err error
}

// deactivation asks an activation to end after the messages queued before it.
type deactivation struct {
	reason Reason
}

// activation is one live agent: its mailbox (which runs its messages
// through receive) and its turns. It is also the agent's Host.
type activation struct {
	rt    *Runtime
	key   string // the canonical address
	agent Agent
	mb    mailbox

	exec        sync.Mutex                  // see turn.go
	cur         atomic.Pointer[turn]        // the mailbox turn in progress
	lastActive  atomic.Int64                // Unix ns, coarse
	idle        int64                       // idle timeout (ns): the type's, else the silo's
	activatedAt int64                       // Unix ns
	timers      map[string]*timer           // touched only in turn
	waiters     atomic.Int32                // turns waiting in Ask
	deactivate  atomic.Int32                // a pending Reason, 0 if none
	failed      atomic.Int32                // a Reason set by a turn that must end the activation
	started     bool                        // OnActivate ran; mailbox goroutine only
	gone        bool                        // deactivated; guarded by exec
	interleaves bool                        // its type has interleaving skills (interleave.go); set before it is shared
	ended       atomic.Bool                 // finished (see Runtime.waitEnded)
	state       atomic.Pointer[stateCursor] // see state.go; nil until the first state call
	// The activation's place in the runtime's idleWheel (wheel.go), guarded
	// by its mu: its bucket's key (0: in none) and its neighbours there.
	wtick        int64
	wprev, wnext *activation
}

var _ Host = (*activation)(nil)

// receive handles one message of the mailbox. It runs on the mailbox's
// goroutine.
func (a *activation) receive(msg any) {
	switch m := msg.(type) {
	case *envelope:
		a.lastActive.Store(a.rt.now.Load())
		a.handle(m)
	case *timer:
		a.tick(m)
	case *deactivation:
		a.deactivate.Store(0)
		if m.reason == ReasonIdle && (a.mb.UserMessageCount() > 0 || a.rt.now.Load()-a.lastActive.Load() < a.idle) {
			return // used again since the request
		}
		a.finish(m.reason)
	}
	if r := a.failed.Load(); r != 0 && !a.gone {
		a.finish(Reason(r))
	}
}

// handle runs one message as a mailbox turn.
func (a *activation) handle(env *envelope) {
	parent := env.ctx
	if parent == nil {
		parent = a.rt.base
	}
	if err := a.rt.awaitServing(parent); err != nil {
		a.respond(env, nil, err)
		return
	}
	t := env.turn
	if t == nil {
		t = new(turn)
	}
	*t = turn{Context: parent, act: a, chain: env.msg.chain, expired: env.expired, deadline: env.deadline, msg: env.msg}
	t.begin()
	a.cur.Store(t)
	var start time.Time
	if a.rt.cfg.Observer != nil {
		start = time.Now()
	}
	reply, err := a.invoke(t, env.msg)
	a.cur.Store(nil)
	t.end()
	if a.rt.cfg.Observer != nil {
		a.handled(env.msg, err, start)
	}
	a.respond(env, reply, err)
}

// reenters reports whether msg is a request of the call chain that this
// activation's current turn is waiting on.
func (a *activation) reenters(msg *Message) bool {
	if msg.Kind != KindRequest || a.waiters.Load() == 0 {
		return false
	}
	t := a.cur.Load()
	return t != nil && t.chain == msg.chain
}

// runReentrant runs env as a nested turn on the caller's goroutine. It
// returns false if the activation ended before the turn could start.
func (a *activation) runReentrant(env *envelope) bool {
	t := &turn{Context: env.ctx, act: a, chain: env.msg.chain, expired: env.expired, deadline: env.deadline, msg: env.msg}
	t.begin()
	if a.gone {
		a.exec.Unlock()
		return false
	}
	if err := a.rt.awaitServing(env.ctx); err != nil {
		t.end()
		a.respond(env, nil, err)
		return true
	}
	var start time.Time
	if a.rt.cfg.Observer != nil {
		start = time.Now()
	}
	reply, err := a.invoke(t, env.msg)
	t.end()
	if a.rt.cfg.Observer != nil {
		a.handled(env.msg, err, start)
	}
	a.respond(env, reply, err)
	return true
}

// invoke calls the agent's handler for msg in turn t, recovering a panic
// into Internal. The caller holds exec, unless t is free (an interleaving
// request's, which never activates the agent: see interleave.go).
func (a *activation) invoke(t *turn, msg *Message) (reply *Message, err error) {
	var ctx context.Context = t
	if end := a.traceTurn(ctx, msg); end != nil { // a traced turn's span (tracing.go)
		defer func() { end(err) }()
	}
	defer func() {
		if r := recover(); r != nil {
			a.rt.logger.Error("agent panicked", "agent", a.key, "message_type", msg.MessageType, "panic", r, "stack", string(debug.Stack()))
			reply, err = nil, errs.New(codes.Internal, "agent %s panicked: %v", a.key, r)
			a.failed.Store(int32(ReasonPanic))
		}
		if err != nil && errors.Is(err, ErrNotRun) {
			// The handler ran: an error it passes on from a call of its own
			// that was not run must not say that this message was not.
			err = errs.New(errs.Code(err), "the turn of %s ran and failed on a call of its own: %s", a.key, err.Error())
		} else if err != nil && silentOnRunning(err) {
			// A code that a caller would read as "may have run" (a store
			// away, a deadline): say that the turn ran, and failed.
			err = errs.Wrap(errs.Code(err), err, "the turn of %s ran and failed", a.key)
		}
	}()
	if !t.free && !a.started {
		a.started = true
		if act, ok := a.agent.(Activator); ok {
			if err := act.OnActivate(ctx); err != nil {
				a.failed.Store(int32(ReasonRequested))
				a.started = false // OnDeactivate is not run for a failed activation
				if errs.Code(err) == codes.Unknown {
					err = errs.Wrap(codes.Internal, err, "agent %s: its activation failed, so the request did not run", a.key)
				}
				return nil, err
			}
		}
		if a.interleaves {
			a.interleavingReady()
		}
	}
	switch {
	case msg.Kind == KindEvent:
		if h, ok := a.agent.(EventHandler); ok {
			return nil, h.OnEvent(ctx, msg)
		}
		return nil, nil
	case isBatch(msg):
		return a.invokeBatch(ctx, msg)
	default:
		return a.agent.OnMessage(ctx, msg)
	}
}

// respond completes a request, or logs a one-way message's error.
func (a *activation) respond(env *envelope, reply *Message, err error) {
	if !env.isRequest() {
		if err != nil {
			a.rt.logger.Debug("one-way message failed", "agent", a.key, "message_type", env.msg.MessageType, "err", err)
		}
		return
	}
	if env.msg.Topic != "" {
		reply, err = outcomeReply(env.msg, reply, err)
	}
	if err != nil {
		env.complete(result{err: err})
		return
	}
	if reply == nil {
		reply = env.msg.Response()
	}
	reply.Kind = KindResponse
	reply.CorrelationID = env.msg.ID
	capLabel(reply, env.msg)
	reply.To, reply.From = env.msg.From, env.msg.To
	if reply.ID == "" {
		if reply.ID = env.replyID; reply.ID == "" {
			reply.ID = newIDAt(env.now)
		}
	}
	env.complete(result{msg: reply})
}

// requestDeactivation queues a deactivation behind the messages queued now.
func (a *activation) requestDeactivation(r Reason) {
	if a.deactivate.CompareAndSwap(0, int32(r)) {
		a.mb.PostUserMessage(&deactivation{reason: r})
	}
}

// finish ends the activation: OnDeactivate, timers, then out of the
// directory. Messages still queued go, in order, to a new activation (which
// is created only after this one's OnDeactivate returned, so the two never
// overlap). Runs on the mailbox's goroutine.
func (a *activation) finish(reason Reason) {
	if a.interleaves {
		a.endInterleaving() // none runs from here on; those running end first
	}
	a.exec.Lock()
	for name := range a.timers {
		a.StopTimer(name)
	}
	// A silo that no longer serves runs no OnDeactivate: another silo may
	// already host the agent. A suspended one waits (within the deactivation
	// timeout) to serve again, so that a transient suspension (etcd slow to
	// renew the lease) does not end an activation without its OnDeactivate.
	if d, ok := a.agent.(Deactivator); ok && a.started {
		ctx, cancel := context.WithTimeout(a.rt.base, a.rt.cfg.DeactivateTimeout)
		if a.rt.awaitServing(ctx) == nil {
			func() {
				defer func() {
					if r := recover(); r != nil {
						a.rt.logger.Error("agent panicked in OnDeactivate", "agent", a.key, "panic", r)
					}
				}()
				d.OnDeactivate(ctx, reason)
			}()
		}
		cancel()
	}
	a.gone = true
	a.exec.Unlock()

	rt := a.rt
	owned, release := true, func() {}
	if p := rt.silo.Placement; p != nil {
		owned, release = p.Hold(a.key)
	}
	sh := rt.dir.shard(a.key)
	sh.mu.Lock()
	rest := a.mb.close()
	var next *activation
	var err error
	var moved []*envelope
	if sh.m[a.key] == a {
		delete(sh.m, a.key)
		if hasEnvelopes(rest) && owned {
			if next, err = rt.activateLocked(a.address(), a.key); err == nil {
				sh.m[a.key] = next
			}
		}
	}
	var failed error // what the requests left get, made once
	for _, m := range rest {
		env, ok := m.(*envelope)
		switch {
		case !ok:
		case next != nil:
			next.mb.PostUserMessage(env)
		case !owned && !rt.closing.Load():
			moved = append(moved, env)
		case env.isRequest():
			if failed == nil && err == nil {
				failed = errs.New(codes.Unavailable, "agent %s is deactivating (the request did not run)", a.key)
			} else if failed == nil {
				failed = errs.Wrap(errs.Code(err), err, "agent %s could not be activated again (the request did not run)", a.key)
			}
			env.complete(result{err: failed})
		}
	}
	sh.mu.Unlock()
	release()
	rt.noteEnded(a)
	rt.wheel.remove(a) // after ended: a sweep holding a does not put it back
	rt.count.Add(-1)
	rt.live.Done()
	if len(moved) > 0 {
		go rt.reroute(moved)
	}
}

func hasEnvelopes(ms []any) bool {
	for _, m := range ms {
		if _, ok := m.(*envelope); ok {
			return true
		}
	}
	return false
}

// Host implementation.

func (a *activation) Address() Address { return a.address() }
func (a *activation) Owner() string    { return a.owner() }

// address returns a's Address: the parts of its key, which holds them (an
// idle activation should be small), cut at its two colons.
func (a *activation) address() Address {
	t, rest, _ := strings.Cut(a.key, ":")
	o, alias, _ := strings.Cut(rest, ":")
	return Address{Type: t, Owner: o, Alias: alias}
}

func (a *activation) owner() string { return ownerOf(a.key) }
func (a *activation) typ() string   { t, _, _ := strings.Cut(a.key, ":"); return t }
func (a *activation) Silo() string  { return a.rt.cfg.Silo }
func (a *activation) Serving() bool { return a.rt.serving() }

// SiloAudit implements siloapi.Audited: the audit log the silo wired in.
func (a *activation) SiloAudit() *audit.Log { return a.rt.silo.Audit }

// WaitServing implements Host.
func (a *activation) WaitServing(ctx context.Context) error { return a.rt.awaitServing(ctx) }

func (a *activation) Ask(ctx context.Context, to string, msg *Message) (*Message, error) {
	if msg == nil {
		return nil, errs.New(codes.InvalidArgument, "nil message")
	}
	msg.To, msg.From, msg.Kind = to, a.key, KindRequest
	if err := a.onBehalf(ctx, msg); err != nil {
		return nil, err
	}
	return a.rt.ask(ctx, a.owner(), msg, 0)
}

func (a *activation) Send(ctx context.Context, to string, msg *Message) error {
	if msg == nil {
		return errs.New(codes.InvalidArgument, "nil message")
	}
	msg.To, msg.From, msg.Kind = to, a.key, KindOneWay
	if err := a.onBehalf(ctx, msg); err != nil {
		return err
	}
	return a.rt.tell(ctx, a.owner(), msg, 0)
}

func (a *activation) Event(ctx context.Context, to string, msg *Message) error {
	if msg == nil {
		return errs.New(codes.InvalidArgument, "nil message")
	}
	msg.To, msg.From, msg.Kind = to, a.key, KindEvent
	if err := a.onBehalf(ctx, msg); err != nil {
		return err
	}
	return a.rt.tell(ctx, a.owner(), msg, 0)
}

func (a *activation) Broadcast(ctx context.Context, pattern string, msg *Message) (int, error) {
	if msg == nil {
		return 0, errs.New(codes.InvalidArgument, "nil message")
	}
	if msg.Kind != KindEvent {
		msg.Kind = KindOneWay
	}
	msg.From = a.key
	msg.OnBehalfOf = a.principal(ctx)
	capLabel(msg, a.turnMessage(ctx))
	msg.Topic, msg.Subscription = "", "" // as onBehalf
	n, err := a.rt.broadcast(ctx, a.owner(), a.key, pattern, msg)
	if err != nil || a.rt.silo.Broadcast == nil {
		return n, err
	}
	m, err := a.rt.silo.Broadcast(ctx, pattern, toWire(msg))
	return n + m, err
}

func (a *activation) Deactivate() { a.failed.Store(int32(ReasonRequested)) }

func (a *activation) Config(ctx context.Context) (map[string]string, error) {
	return a.rt.cfg.Configs.Get(ctx, a.address())
}

func (a *activation) Logger() *slog.Logger { return a.rt.logger.With("agent", a.key) }

// timer is one in-memory timer of an activation.
type timer struct {
	name, messageType, message string
	period                     time.Duration
	mu                         sync.Mutex // guards t: the timer's own callback re-arms it
	t                          clock.Timer
	queued                     atomic.Bool
	stopped                    atomic.Bool
}

func (a *activation) RegisterTimer(name string, due, period time.Duration, messageType, message string) error {
	if name == "" {
		return errs.New(codes.InvalidArgument, "timer name is empty")
	}
	if due < 0 || period < 0 {
		return errs.New(codes.InvalidArgument, "timer %q: negative due time or period", name)
	}
	if IsReserved(messageType) {
		return errs.New(codes.InvalidArgument, "timer %q: message type %q is reserved", name, messageType)
	}
	a.StopTimer(name)
	tm := &timer{name: name, messageType: messageType, message: message, period: period}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.t = a.rt.clock.AfterFunc(due, func() {
		if tm.stopped.Load() {
			return
		}
		if tm.queued.CompareAndSwap(false, true) {
			a.mb.PostUserMessage(tm)
		}
		if tm.period > 0 {
			tm.mu.Lock() // also waits for RegisterTimer to have set tm.t
			if !tm.stopped.Load() {
				tm.t.Reset(tm.period)
			}
			tm.mu.Unlock()
		}
	})
	if a.timers == nil {
		a.timers = make(map[string]*timer)
	}
	a.timers[name] = tm
	return nil
}

func (a *activation) StopTimer(name string) bool {
	tm, ok := a.timers[name]
	if !ok {
		return false
	}
	tm.stopped.Store(true)
	tm.mu.Lock()
	tm.t.Stop()
	tm.mu.Unlock()
	delete(a.timers, name)
	return true
}

// tick delivers a timer's message as a one-way turn.
func (a *activation) tick(tm *timer) {
	tm.queued.Store(false)
	a.exec.Lock()
	live := !tm.stopped.Load() && a.timers[tm.name] == tm
	if live && tm.period == 0 {
		delete(a.timers, tm.name)
	}
	a.exec.Unlock()
	if !live {
		return
	}
	a.lastActive.Store(a.rt.now.Load())
	msg := &Message{ID: NewID(), To: a.key, From: a.key, OnBehalfOf: a.owner(), Kind: KindOneWay, MessageType: tm.messageType, Message: tm.message}
	msg.chain = msg.ID
	a.handle(&envelope{msg: msg})
}

func (a *activation) String() string { return fmt.Sprintf("activation(%s)", a.key) }

// silentOnRunning reports whether err, returned by a handler, has a code
// that a caller reads as "may have run" or "did not run" (Unavailable,
// DeadlineExceeded, Canceled, ResourceExhausted) and does not say itself
// whether the turn ran: then the runtime says so (see docs/errors.md).
func silentOnRunning(err error) bool {
	switch errs.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
	default:
		return false
	}
	msg := err.Error()
	for _, says := range []string{"ran and", "may have", "did not run", "not run", "it ran", "turn ran"} {
		if strings.Contains(msg, says) {
			return false
		}
	}
	return true
}
