package grain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/deadline"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// Runtime hosts the activations of one silo. It activates an agent when the
// first message for its address arrives, runs it one message at a time as a
// mailbox of its own (see mailbox.go), and deactivates it when idle or at Close.
//
// All methods are safe for concurrent use.
type Runtime struct {
	cfg    Config
	reg    *Registry
	logger *slog.Logger

	dispatcher *dispatcher

	dir       directory
	wheel     idleWheel // when each activation becomes idle (wheel.go)
	idem      idemCache // see idempotency.go
	deadlines deadline.Slots
	lastTick  atomic.Pointer[tickContext] // see backgroundDeadline
	live      sync.WaitGroup              // one per activation not yet removed
	count     atomic.Int64

	// interleaved holds, for each activation of a type with interleaving
	// skills, its *interleaving (see interleave.go): from newActivation
	// until it ends or is discarded.
	interleaved sync.Map

	endMu sync.Mutex    // guards endCh
	endCh chan struct{} // closed when an activation ends; nil if nobody waits

	base     context.Context // cancelled by Close; parent of one-way turns
	cancel   context.CancelFunc
	closing  atomic.Bool
	clock    clock.Clock        // silo.Clock: idle collection, timers, activation times
	now      atomic.Int64       // coarse clock (Unix ns), advanced by each sweep
	sweeps   chan chan struct{} // see sweepNow
	sweepBuf []*activation      // sweep's; the collect goroutine only
	stop     chan struct{}
	stopped  sync.WaitGroup

	// silo is what a silo wired in (siloapi.Wire on its Config), its
	// clock defaulted to the real one.
	silo siloapi.Wiring
	// siloHandle holds the runtime's silo-only API, which New binds and
	// package cluster takes with siloapi.Of (see placement.go).
	siloHandle
}

// New starts a runtime for the agent types in reg.
func New(cfg Config, reg *Registry) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errs.New(codes.InvalidArgument, "grain: nil Registry")
	}
	if cfg.Configs == nil {
		cfg.Configs = newMemoryConfigStore()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Silo == "" {
		cfg.Silo = "local"
	}
	silo := siloapi.Wired(&cfg.siloSlot)
	if silo.Clock == nil {
		silo.Clock = clock.Real{}
	}
	rt := &Runtime{cfg: cfg, silo: silo, reg: reg, logger: cfg.Logger, clock: silo.Clock, stop: make(chan struct{}), sweeps: make(chan chan struct{})}
	siloapi.Bind(&rt.siloHandle, siloRuntime{rt})
	rt.base, rt.cancel = context.WithCancel(context.Background())
	rt.dispatcher = newDispatcher(300)
	rt.dir.init()
	rt.wheel.init(int64(cfg.IdleTimeout))
	rt.idem.init(cfg.IdempotencyWindow, cfg.IdempotencyKeys)
	rt.now.Store(rt.clock.Now().UnixNano())
	rt.stopped.Add(1)
	// The sweep timer exists before New returns, so that a test's fake clock
	// moved after New fires it.
	go rt.collect(rt.clock.NewTimer(sweepEvery(cfg.IdleTimeout)))
	return rt, nil
}

// Registry returns the runtime's agent types.
func (rt *Runtime) Registry() *Registry { return rt.reg }

// Config returns the runtime's configuration, defaults filled in.
func (rt *Runtime) Config() Config { return rt.cfg }

// Ask sends a REQUEST on behalf of the sender named in msg.From (an agent or
// session address, whose owner resolves a relative msg.To) and waits for the
// reply. The gateway calls it for clients; agents use Host.Ask. A request
// for a typed skill whose arguments do not match the skill's input schema
// is refused with InvalidArgument (see Registry.ValidateInput).
func (rt *Runtime) Ask(ctx context.Context, msg *Message) (*Message, error) {
	if msg == nil {
		return nil, errs.New(codes.InvalidArgument, "nil message")
	}
	msg.Kind = KindRequest
	if err := rt.reg.validateMessage(msg); err != nil {
		return nil, err
	}
	return rt.ask(ctx, ownerOf(msg.From), msg, 0)
}

// Send delivers a ONE_WAY message or, if msg.Kind is KIND_EVENT, an event,
// on behalf of the sender named in msg.From.
func (rt *Runtime) Send(ctx context.Context, msg *Message) error {
	if msg == nil {
		return errs.New(codes.InvalidArgument, "nil message")
	}
	if msg.Kind != KindEvent {
		msg.Kind = KindOneWay
	}
	if err := rt.reg.validateMessage(msg); err != nil {
		return err
	}
	return rt.tell(ctx, ownerOf(msg.From), msg, 0)
}

// CreateAgent stores the configuration of the agent at addr (relative to
// owner). The type must be registered.
func (rt *Runtime) CreateAgent(ctx context.Context, owner, addr string, cfg map[string]string) (Address, error) {
	a, err := Resolve(addr, owner)
	if err != nil {
		return Address{}, err
	}
	if _, ok := rt.reg.Lookup(a.Type); !ok {
		return Address{}, rt.reg.unknown(a.Type)
	}
	if err := rt.cfg.Configs.Put(ctx, a, cfg); err != nil {
		return Address{}, err
	}
	return a, nil
}

// ActivationInfo describes one live activation.
type ActivationInfo struct {
	Address      Address
	Silo         string
	ActivatedAt  time.Time
	LastActive   time.Time
	MailboxDepth int
}

// Activations lists the live activations, of one type if typeName is not empty.
func (rt *Runtime) Activations(typeName string) []ActivationInfo {
	var out []ActivationInfo
	rt.dir.each(func(a *activation) {
		if typeName == "" || a.typ() == typeName {
			out = append(out, ActivationInfo{
				Address:      a.address(),
				Silo:         rt.cfg.Silo,
				ActivatedAt:  time.Unix(0, a.activatedAt),
				LastActive:   time.Unix(0, max(a.lastActive.Load(), a.activatedAt)), // the coarse clock may lag
				MailboxDepth: a.mb.UserMessageCount(),
			})
		}
	})
	return out
}

// Len returns the number of live activations.
func (rt *Runtime) Len() int { return int(rt.count.Load()) }

// Close deactivates every activation (running OnDeactivate with
// ReasonShutdown) and stops the runtime. New messages get Unavailable from the
// moment Close is called. If ctx ends first, Close returns its error and the
// remaining activations are abandoned.
func (rt *Runtime) Close(ctx context.Context) error {
	if !rt.closing.CompareAndSwap(false, true) {
		return nil
	}
	close(rt.stop)
	rt.stopped.Wait()
	rt.dir.each(func(a *activation) { a.requestDeactivation(ReasonShutdown) })
	done := make(chan struct{})
	go func() {
		rt.live.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("grain: close: %d activations still live: %w", rt.Len(), ctx.Err())
	}
	rt.cancel()
	rt.deadlines.Close()
	if err == nil {
		rt.dispatcher.close()
	} else {
		rt.dispatcher.release() // no parked worker outlives the runtime
	}
	return err
}

// errShuttingDown refuses a message once Close has begun: no agent ran it.
var errShuttingDown = notRun(errs.New(codes.Unavailable, "silo is shutting down"))

// ask is the one path of every REQUEST. hops is 0 for a request that starts
// here, else the number of silos it came through.
func (rt *Runtime) ask(ctx context.Context, owner string, msg *Message, hops int) (*Message, error) {
	t := turnFrom(ctx)
	if hops == 0 && rt.callTraced(t, msg) {
		return rt.askTraced(ctx, t, owner, msg)
	}
	return rt.askFrom(ctx, t, owner, msg, hops)
}

// askFrom is ask from turn t (nil: not from a turn).
func (rt *Runtime) askFrom(ctx context.Context, t *turn, owner string, msg *Message, hops int) (*Message, error) {
	now := time.Now().UnixNano()
	env := envelopes.Get().(*envelope)
	env.msg, env.now = msg, now
	done := ctx.Done()
	if _, ok := ctx.Deadline(); !ok {
		if done == nil {
			// The common case of a caller without a context of its own:
			// share a deadline with the other Asks due at the same moment.
			env.expired, env.deadline = rt.deadlines.After(now + int64(rt.cfg.AskTimeout))
			done = env.expired
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, rt.cfg.AskTimeout)
			defer cancel()
			done = ctx.Done()
		}
	}
	env.ctx = ctx
	var replyID *string
	if hops == 0 && msg.Topic == "" {
		replyID = &env.replyID
	}
	a, err := rt.prepare(ctx, t, owner, msg, now, hops == 0, replyID)
	if err == nil && isSession(msg.To) {
		err = errs.New(codes.InvalidArgument, "ask %s: client sessions take one-way messages and events only", msg.To)
	}
	if err != nil {
		env.release()
		rt.refused(msg, err)
		return nil, err
	}
	if t != nil && !t.free {
		// Give the turn's lock back before sending, so that a request of this
		// chain that comes back to the caller finds it waiting.
		t.beginWait()
		defer t.endWait()
	}
	if p := rt.silo.Placement; p != nil {
		for i := 0; ; i++ {
			silo := p.Route(msg.To)
			if silo != "" {
				// ErrMoved: the placement did not deliver it, and a newer
				// view moved the address: route it again.
				r, err := rt.forward(ctx, silo, msg, hops, now)
				if errors.Is(err, siloapi.ErrMoved) && i < maxReroutes {
					a = nil
					continue
				}
				env.release()
				return r, err
			}
			err := rt.deliver(ctx, a, env)
			if err == nil {
				break
			}
			if !errors.Is(err, siloapi.ErrMoved) || i == maxReroutes {
				env.release()
				rt.refused(msg, err)
				return nil, err
			}
			a = nil
		}
	} else if err := rt.deliver(ctx, a, env); err != nil {
		env.release()
		rt.refused(msg, err)
		return nil, err
	}
	// A reply and the deadline may both be there (a turn run on this
	// goroutine that returned after the deadline): the deadline wins, as it
	// does for a caller that was waiting when it passed.
	select {
	case <-done:
	default:
		select {
		case r := <-env.reply:
			env.release() // the responder is done with it
			return r.msg, r.err
		case <-done:
		}
	}
	// The envelope is not reused: the agent may still answer into it.
	// It was delivered: its turn may have run, or may run yet.
	if env.expired == nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil, errs.New(codes.Canceled, "ask %s: cancelled after it was delivered: it may have run", msg.To)
	}
	return nil, errs.New(codes.DeadlineExceeded, "ask %s: deadline exceeded after it was delivered: it may have run", msg.To)
}

// tell is the one path of every ONE_WAY message and EVENT; hops as for ask.
func (rt *Runtime) tell(ctx context.Context, owner string, msg *Message, hops int) error {
	t := turnFrom(ctx)
	if hops == 0 && rt.callTraced(t, msg) {
		return rt.tellTraced(ctx, t, owner, msg)
	}
	return rt.tellFrom(ctx, t, owner, msg, hops)
}

// tellFrom is tell from turn t (nil: not from a turn).
func (rt *Runtime) tellFrom(ctx context.Context, t *turn, owner string, msg *Message, hops int) error {
	a, err := rt.prepare(ctx, t, owner, msg, time.Now().UnixNano(), hops == 0, nil)
	if err != nil {
		rt.refused(msg, err)
		return err
	}
	if isSession(msg.To) {
		if rt.silo.Sessions == nil {
			return errs.New(codes.NotFound, "no client session %s", msg.To)
		}
		return rt.silo.Sessions.DeliverToSession(ctx, toWire(msg))
	}
	if rt.silo.Placement != nil {
		return rt.route(ctx, &envelope{msg: msg}, hops)
	}
	err = rt.deliver(ctx, a, &envelope{msg: msg})
	rt.refused(msg, err)
	return err
}

// prepare validates msg, resolves msg.To to its canonical form and, if stamp,
// stamps the runtime's fields (id, call chain; a message forwarded by another
// silo keeps them). If replyID is not nil and msg is to be answered here
// (its activation is live here, or there is no placement), the id of its
// reply is made with msg's in one allocation and put in *replyID; a reply
// from another silo comes with its own. It returns msg.To's live activation
// if there is one, to save deliver a lookup.
func (rt *Runtime) prepare(ctx context.Context, t *turn, owner string, msg *Message, now int64, stamp bool, replyID *string) (*activation, error) {
	if rt.closing.Load() {
		return nil, errShuttingDown
	}
	if IsReserved(msg.MessageType) {
		return nil, errs.New(codes.InvalidArgument, "message type %q: the %q prefix is reserved for the runtime", clip(msg.MessageType), ReservedPrefix)
	}
	if n := approxSize(msg); n > rt.cfg.MaxMessageSize/2 {
		if n = wireSize(msg); n > rt.cfg.MaxMessageSize {
			return nil, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d: not sent, so it did not run", n, rt.cfg.MaxMessageSize)
		}
	}
	a := rt.dir.get(msg.To)
	if a == nil {
		addr, err := Resolve(msg.To, owner)
		if err != nil {
			return nil, err
		}
		if len(addr.Type)+len(addr.Owner)+len(addr.Alias)+2 != len(msg.To) {
			// Relative: a canonical msg.To is kept as it is, and becomes
			// the activation's key without a copy.
			msg.To = addr.String()
		}
		if addr.Type != SessionType {
			if _, ok := rt.reg.Lookup(addr.Type); !ok {
				return nil, rt.reg.unknown(addr.Type)
			}
		}
	}
	if (stamp && msg.Topic == "") || msg.ID == "" {
		// A topic delivery keeps its published id.
		if replyID != nil && (a != nil || rt.silo.Placement == nil) {
			msg.ID, *replyID = newIDPair(now)
		} else {
			msg.ID = newIDAt(now)
		}
	}
	if t != nil {
		msg.chain = t.chain
		if msg.traceparent == "" {
			msg.traceparent = t.msg.traceparent
		}
	} else {
		if msg.chain == "" {
			msg.chain = msg.ID
		}
		if stamp && msg.traceparent == "" {
			// Sent here from outside a turn (a forwarded message
			// carries its trace from its first silo).
			msg.traceparent = rt.outsideTraceparent(ctx)
		}
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx, "send to "+msg.To)
	}
	return a, nil
}

// deliver queues env at the activation of env.msg.To (a, if not nil),
// activating it if needed, or runs it at once if it re-enters a waiting call
// chain.
func (rt *Runtime) deliver(ctx context.Context, a *activation, env *envelope) error {
	if env.msg.IdempotencyKey != "" && env.idem == nil {
		e, dup := rt.idem.begin(idemKey(env.msg), rt.clock.Now().UnixNano())
		if dup {
			answerDuplicate(e, env)
			return nil
		}
		env.idem = e
		// Read before post: once posted, a request may be answered and its
		// envelope released to the pool (and reused) at any moment.
		req := env.isRequest()
		err := rt.post(ctx, a, env)
		switch {
		case err != nil:
			env.idem = nil
			e.finish(result{err: err})
		case !req:
			e.finish(result{}) // handed over: that is all a one-way message gets
		}
		return err
	}
	return rt.post(ctx, a, env)
}

// post is deliver without the idempotency check.
func (rt *Runtime) post(ctx context.Context, a *activation, env *envelope) error {
	for ; ; a = nil {
		if a == nil {
			var err error
			if a, err = rt.activation(ctx, env.msg.To); err != nil {
				return err
			}
		}
		if a.reenters(env.msg) {
			if a.runReentrant(env) {
				return nil
			}
			continue // it deactivated meanwhile: look it up again
		}
		if env.reply != nil && a.mb.claim() {
			// A local Ask to an idle activation: its caller would only
			// wait, so it runs the turn itself, without two goroutine
			// hand-offs (see runInline).
			a.mb.runInline(env)
			return nil
		}
		if a.interleaves && a.interleave(env) {
			return nil // a request for an interleaving skill, run beside the turn
		}
		done := ctx.Done()
		if env.expired != nil {
			done = env.expired
		}
		switch err := a.mb.post(done, env); err {
		case nil:
			return nil
		case errClosed:
			continue // deactivated; the directory already points past it
		default:
			if env.expired != nil {
				return errs.New(codes.DeadlineExceeded, "send to %s: deadline exceeded before it was delivered: it did not run", env.msg.To)
			}
			return ctxError(ctx, "send to "+env.msg.To)
		}
	}
}

// activation returns the live activation of the canonical address key,
// creating it if there is none. The new activation is made (its factory run)
// before the directory shard is locked, so that concurrent activations of
// different agents do not wait on each other; if another sender won the race,
// the spare is discarded before it ever ran (its OnActivate runs at its first
// message, which it never gets). With a Placement, the activation is
// claimed first (see Placement.Claim).
func (rt *Runtime) activation(ctx context.Context, key string) (*activation, error) {
	if a := rt.dir.get(key); a != nil {
		return a, nil
	}
	addr, err := ParseAddress(key)
	if err != nil {
		return nil, err
	}
	if p := rt.silo.Placement; p != nil {
		commit, err := p.Claim(ctx, key)
		if err != nil {
			// Refused before the agent existed (this silo is fenced, not
			// serving, or the handover failed): no agent ran the message,
			// and a caller that can send it again, within its deadline, may.
			if !errors.Is(err, siloapi.ErrMoved) && !errors.Is(err, ErrNotRun) {
				err = notRun(err)
			}
			return nil, err
		}
		defer commit()
	}
	fresh, err := rt.newActivation(addr, key)
	if err != nil {
		return nil, err
	}
	sh := rt.dir.shard(key)
	sh.mu.Lock()
	a := sh.m[key]
	if a == nil && rt.closing.Load() {
		err = errShuttingDown
	}
	if a == nil && err == nil {
		sh.m[fresh.key] = fresh
	}
	sh.mu.Unlock()
	if a != nil || err != nil {
		rt.discard(fresh)
		return a, err
	}
	fresh.mb.start()
	return fresh, nil
}

// activateLocked makes and starts a new activation while the caller
// holds the directory shard of key; the caller puts it in the shard.
func (rt *Runtime) activateLocked(addr Address, key string) (*activation, error) {
	a, err := rt.newActivation(addr, key)
	if err != nil {
		return nil, err
	}
	a.mb.start()
	return a, nil
}

// newActivation creates an activation, whose mailbox holds every message
// until mb.start.
func (rt *Runtime) newActivation(addr Address, key string) (a *activation, err error) {
	if rt.closing.Load() {
		return nil, errShuttingDown
	}
	typ := rt.reg.lookup(addr.Type)
	if typ == nil {
		return nil, rt.reg.unknown(addr.Type)
	}
	factory := typ.factory
	// The key is the activation's own copy: msg.To, which it came from,
	// may share its bytes with the rest of the message (the peer codec
	// reads a message's strings into one allocation), which the activation
	// would otherwise keep for as long as it lives.
	key = strings.Clone(key)
	a = &activation{rt: rt, key: key, idle: int64(rt.cfg.IdleTimeout)}
	a.mb.act = a
	a.mb.limit = int32(rt.cfg.MailboxSize)
	if n := typ.info.MailboxSize; n > 0 {
		a.mb.limit = int32(min(n, math.MaxInt32))
	}
	if d := typ.info.IdleTimeout; d > 0 {
		a.idle = int64(d)
	}
	a.mb.held = true
	now := rt.clock.Now().UnixNano()
	a.activatedAt = now
	a.lastActive.Store(now)
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = errs.New(codes.Internal, "agent %s: its factory panicked, so the request did not run: %v", key, r)
			}
		}()
		a.agent, err = factory(a)
	}()
	if err == nil && a.agent == nil {
		err = errs.New(codes.Internal, "agent %s: its factory returned no agent, so the request did not run", key)
	}
	if err != nil {
		if errs.Code(err) == codes.Unknown {
			err = errs.Wrap(codes.Internal, err, "agent %s: its factory failed, so the request did not run", key)
		}
		return nil, err
	}
	if typ.interleave != nil {
		a.interleaves = true
		rt.interleaved.Store(a, &interleaving{skills: typ.interleave})
	}
	rt.live.Add(1)
	rt.count.Add(1)
	rt.wheel.add(a, now+a.idle)
	return a, nil
}

// discard stops an activation that never entered the directory.
func (rt *Runtime) discard(a *activation) {
	if a.interleaves {
		rt.interleaved.Delete(a)
	}
	a.mb.close()
	a.mb.start()
	rt.noteEnded(a)
	rt.wheel.remove(a) // after ended: a sweep holding a does not put it back
	rt.count.Add(-1)
	rt.live.Done()
}

// collect runs the idle collection: a sweep each time t fires (see
// sweepEvery) or a test asks for one (sweepNow), until Close.
func (rt *Runtime) collect(t clock.Timer) {
	defer rt.stopped.Done()
	defer t.Stop()
	for {
		var swept chan struct{}
		select {
		case <-rt.stop:
			return
		case <-t.C():
		case swept = <-rt.sweeps:
		}
		t.Reset(rt.sweep())
		if swept != nil {
			close(swept)
		}
	}
}

// sweep advances the coarse clock to the Clock's time, asks every activation
// idle for its type's idle timeout to deactivate, and returns the wait until
// the next sweep. It visits only the activations whose idle moment has come
// (see idleWheel), and puts back those that stay: the used-again at their
// new moment, the idle a sweep later, to be asked again if they are still
// there (an activation may decline: see activation.receive).
func (rt *Runtime) sweep() time.Duration {
	now := rt.clock.Now().UnixNano()
	rt.now.Store(now)
	if !rt.serving() {
		// Suspended (or fenced): OnDeactivate could not run. Idle
		// activations stay in the wheel until the silo serves again.
		return sweepEvery(time.Duration(rt.wheel.shortestIdle()))
	}
	due := rt.wheel.due(now, rt.sweepBuf[:0])
	for i, a := range due {
		at := a.lastActive.Load() + a.idle
		if now >= at {
			a.requestDeactivation(ReasonIdle)
			at = now + int64(sweepEvery(time.Duration(a.idle)))
		}
		rt.wheel.add(a, at)
		due[i] = nil
	}
	if cap(due) <= 1024 {
		rt.sweepBuf = due[:0] // keep a small buffer, drop a large one
	}
	return sweepEvery(time.Duration(rt.wheel.shortestIdle()))
}

// sweepEvery is the time between sweeps for the shortest idle timeout in
// use: a quarter of it, within 1 ms and 1 s, so that an activation ends at
// most a quarter (or a second) after it became idle.
func sweepEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, time.Millisecond), time.Second)
}

// sweepNow runs a sweep at the Clock's present time and returns once it is
// done: the deactivations it asked for are queued. Tests with a fake clock
// call it after moving the clock, instead of waiting for the sweep timer.
func (rt *Runtime) sweepNow(ctx context.Context) error {
	swept := make(chan struct{})
	select {
	case rt.sweeps <- swept:
	case <-ctx.Done():
		return ctx.Err()
	case <-rt.stop:
		return errs.New(codes.Unavailable, "runtime closed")
	}
	select {
	case <-swept:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// broadcast delivers msg to every live activation here matching pattern,
// except the sender's (fromKey), sent by an agent of owner on behalf of
// msg.OnBehalfOf; another owner's agents that principal may not message are
// left out.
func (rt *Runtime) broadcast(ctx context.Context, owner, fromKey, pattern string, msg *Message) (int, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return 0, errs.New(codes.InvalidArgument, "broadcast pattern %q: %w", clip(pattern), err)
	}
	var targets []string
	rt.dir.each(func(a *activation) {
		if a.key != fromKey {
			if ok, _ := path.Match(pattern, a.key); ok {
				targets = append(targets, a.key)
			}
		}
	})
	n := 0
	for _, to := range targets {
		m := msg.Clone()
		m.To = to
		if !rt.mayReach(ctx, owner, m) {
			continue // a target the call chain may not message is not reached
		}
		if err := rt.tell(ctx, owner, m, 0); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// BroadcastLocal delivers msg (an EVENT if its kind is KIND_EVENT, else
// ONE_WAY) to every activation of this silo whose address matches the
// glob pattern, except the sender's (msg.From), and returns how many it
// reached. The silo calls it for a broadcast that another silo, or a
// client, started.
func (rt *Runtime) BroadcastLocal(ctx context.Context, pattern string, msg *Message) (int, error) {
	if msg == nil {
		return 0, errs.New(codes.InvalidArgument, "nil message")
	}
	if msg.Kind != KindEvent {
		msg.Kind = KindOneWay
	}
	return rt.broadcast(ctx, ownerOf(msg.From), msg.From, pattern, msg)
}

func isSession(to string) bool {
	return len(to) > len(SessionType) && to[len(SessionType)] == ':' && to[:len(SessionType)] == SessionType
}

// ownerOf returns the part of addr between its first and second colon: the
// owner of a canonical address. It does not validate; Resolve validates the
// address the owner ends up in.
func ownerOf(addr string) string {
	_, rest, ok := strings.Cut(addr, ":")
	if !ok {
		return ""
	}
	owner, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return owner
}

// ctxError is the error of what, which ctx's end stopped before it began:
// it did not run.
func ctxError(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "%s: cancelled before it ran", what)
	}
	return errs.New(codes.DeadlineExceeded, "%s: deadline exceeded before it ran", what)
}

// mayReach reports whether m, sent by an agent of owner on behalf of
// m.OnBehalfOf (owner if none), may reach m.To: always for the sender's own
// owner and the principal's, else as the Authorizer says.
func (rt *Runtime) mayReach(ctx context.Context, owner string, m *Message) bool {
	az := rt.cfg.Authorizer
	if az == nil {
		return true
	}
	p := m.OnBehalfOf
	if p == "" {
		p = owner
	}
	toOwner := ownerOf(m.To)
	if toOwner == "" || toOwner == owner || toOwner == p {
		return true
	}
	to, err := Resolve(m.To, owner)
	if err != nil {
		return true
	}
	return az.AuthorizeMessage(ctx, p, to) == nil
}
