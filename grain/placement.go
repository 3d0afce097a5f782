package grain

import (
	"context"
	"errors"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/deadline"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A Runtime in a silo is wired to a placement (siloapi.Placement, package
// cluster's router) that places addresses across the silos of a cluster:
// Runtime.silo, which New takes from what siloapi.Wire set in its Config
// (siloSlot). A
// Runtime without one hosts every address itself. This file is how the
// runtime uses it: routing, claiming activations, forwarding, and the
// silo-only API (siloRuntime, which New binds to the runtime's siloHandle
// for siloapi.Of) that runs what other silos forward.

// errNotServing fails the messages of a silo that is no longer serving.
var errNotServing = notRun(errs.New(codes.Unavailable, "silo is fenced: it no longer serves activations"))

// ErrNotRun is matched (errors.Is) by the errors of messages that the
// runtime refused before any agent ran them: the silo is shutting down, is
// fenced, or stayed suspended past the message's deadline. Such a message
// may be sent again, to the address's owner in a newer view, without
// running twice; a silo that forwarded it does so (package cluster). The
// error keeps its code (Unavailable, or the deadline's).
var ErrNotRun = errors.New("grain: not run")

// notRunError marks err as ErrNotRun. Its NotRun method is how package
// cluster's transport, which does not import grain, tells the sender.
type notRunError struct{ err error }

func (e notRunError) Error() string        { return e.err.Error() }
func (e notRunError) Unwrap() error        { return e.err }
func (e notRunError) Is(target error) bool { return target == ErrNotRun }
func (e notRunError) NotRun() bool         { return true }

// notRun marks err (not nil) as ErrNotRun.
func notRun(err error) error { return notRunError{err} }

// serving reports whether turns may run (see siloapi.Placement.Serving).
func (rt *Runtime) serving() bool {
	p := rt.silo.Placement
	return p == nil || p.Serving()
}

// awaitServing returns nil if turns may run, waiting while the silo is
// suspended (see siloapi.ServingWaiter), bounded by ctx.
func (rt *Runtime) awaitServing(ctx context.Context) error {
	if rt.serving() {
		return nil
	}
	w, ok := rt.silo.Placement.(siloapi.ServingWaiter)
	if !ok {
		return errNotServing
	}
	err := w.WaitServing(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return notRun(errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "the silo is suspended (its membership unconfirmed: etcd not answering) and did not serve again in time: the request did not run"))
	}
	return notRun(err)
}

// maxReroutes bounds how often one message is routed again because its
// address moved while it was being delivered.
const maxReroutes = 4

// askRemote runs a REQUEST that another silo forwarded here after hops
// silos: like Ask, but msg keeps its id and call chain, and its sender is not
// checked (silos trust each other). Package cluster calls it.
func (rt *Runtime) askRemote(ctx context.Context, msg *Message, hops int) (*Message, error) {
	if msg == nil {
		return nil, errs.New(codes.InvalidArgument, "nil message")
	}
	msg.Kind = KindRequest
	return rt.ask(ctx, ownerOf(msg.From), msg, hops)
}

// sendRemote delivers a ONE_WAY message or EVENT that another silo forwarded
// here after hops silos.
func (rt *Runtime) sendRemote(ctx context.Context, msg *Message, hops int) error {
	if msg == nil {
		return errs.New(codes.InvalidArgument, "nil message")
	}
	if msg.Kind != KindEvent {
		msg.Kind = KindOneWay
	}
	return rt.tell(ctx, ownerOf(msg.From), msg, hops)
}

// askRemoteAsync is askRemote without a goroutine waiting for the reply:
// it returns once msg is queued at its activation (activated if need be,
// waiting for room bounded by ctx) or forwarded on (on a goroutine of its
// own), and done gets the reply or the error, once, later or at once. The
// transport calls it in the order the sender sent, so that a request keeps
// its place among the one-way messages of the same sender.
func (rt *Runtime) askRemoteAsync(ctx context.Context, msg *Message, hops int, done func(*agentsilov1.AgentMessage, error)) {
	if msg == nil {
		done(nil, errs.New(codes.InvalidArgument, "nil message"))
		return
	}
	msg.Kind = KindRequest
	now := time.Now().UnixNano()
	a, err := rt.prepare(ctx, nil, ownerOf(msg.From), msg, now, hops == 0, nil)
	if err == nil && isSession(msg.To) {
		err = errs.New(codes.InvalidArgument, "ask %s: client sessions take one-way messages and events only", msg.To)
	}
	if err != nil {
		rt.refused(msg, err)
		done(nil, err)
		return
	}
	env := &envelope{msg: msg, ctx: ctx, done: done, now: now}
	if rt.silo.Placement != nil {
		err = rt.route(ctx, env, hops)
	} else if err = rt.deliver(ctx, a, env); err != nil {
		rt.refused(msg, err)
	}
	if err != nil {
		done(nil, err)
	}
}

// tryAskRemote is askRemote without a goroutine waiting for the reply, for
// the common case: msg, a REQUEST another silo forwarded (id and call chain
// set), is for a live activation owned here that it can join at once (not a
// call that re-enters a waiting turn, room in the mailbox). Then it queues msg
// and returns true, and done gets the reply or error later, from the
// activation's goroutine (or the runtime's), so it must not block for long.
// Otherwise it returns false and has done nothing: use askRemote.
//
// owned says that the sender routed msg here with the view this silo has
// now, in which this silo owns msg.To: the placement is not asked again.
// That lookup is not what keeps an address to one activation (the
// placement's Claim is, with the deactivation of what a view moves away,
// after which the directory no longer has it); it sends a request that a
// newer view moved elsewhere on to its owner rather than into an
// activation about to end, whose queued messages would follow it there.
func (rt *Runtime) tryAskRemote(ctx context.Context, msg *Message, hops int, owned bool, done func(*agentsilov1.AgentMessage, error)) bool {
	// Whether the silo serves is not asked here: the turn asks, as every
	// turn does, before it runs (activation.handle).
	if msg == nil || msg.ID == "" || msg.IdempotencyKey != "" || rt.closing.Load() || IsReserved(msg.MessageType) {
		return false
	}
	a := rt.dir.get(msg.To)
	if a == nil {
		return false
	}
	if p := rt.silo.Placement; p != nil && !owned && p.Route(msg.To) != "" {
		return false
	}
	if approxSize(msg) > rt.cfg.MaxMessageSize/2 {
		return false
	}
	msg.Kind = KindRequest
	if msg.chain == "" {
		msg.chain = msg.ID
	}
	if a.reenters(msg) || (a.interleaves && a.interleavingOf(msg) != nil) {
		return false // runs at once, on a goroutine: see askRemoteAsync
	}
	r := &remoteRequest{env: envelope{msg: msg, ctx: ctx, done: done, now: time.Now().UnixNano()}}
	r.env.turn = &r.t
	putID(&r.id, r.env.now)
	r.env.replyID = unsafe.String(&r.id[0], len(r.id)) // r is never reused: the bytes stay as they are
	return a.mb.post(closedChan, &r.env) == nil
}

// closedChan makes a mailbox post give up at once instead of waiting for room.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// rehome deactivates, each after its current turn and the messages queued
// before it, the activations for which keep returns false, and returns once
// they have all ended (their OnDeactivate ran) or ctx ends. Package cluster
// calls it when the view moves addresses away from this silo.
func (rt *Runtime) rehome(ctx context.Context, keep func(key string) bool) error {
	var moving []*activation
	rt.dir.each(func(a *activation) {
		if !keep(a.key) {
			moving = append(moving, a)
		}
	})
	for _, a := range moving {
		a.requestDeactivation(ReasonMoved)
	}
	for _, a := range moving {
		if err := rt.waitEnded(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// release deactivates the activation of key, if there is one, and returns
// once it has ended or ctx ends. Package cluster calls it when the silo that
// now owns key asks for it; the caller makes sure that this silo no longer
// routes key to itself, so no new activation can start meanwhile.
func (rt *Runtime) release(ctx context.Context, key string) error {
	_, err := rt.deactivate(ctx, key, ReasonMoved)
	return err
}

// Deactivate ends the activation of addr on this silo, if there is one,
// after its current turn (OnDeactivate gets ReasonRequested), and returns
// once it has ended or ctx ends; wasActive says whether there was one. An
// agent that is not active here is left alone (wasActive false). In a
// cluster, the gateway's Deactivate reaches the silo that holds the agent.
func (rt *Runtime) Deactivate(ctx context.Context, addr Address) (wasActive bool, err error) {
	return rt.deactivate(ctx, addr.String(), ReasonRequested)
}

func (rt *Runtime) deactivate(ctx context.Context, key string, why Reason) (wasActive bool, err error) {
	for {
		a := rt.dir.get(key)
		if a == nil {
			return wasActive, nil
		}
		wasActive = true
		a.requestDeactivation(why)
		if err := rt.waitEnded(ctx, a); err != nil {
			return wasActive, err
		}
	}
}

// waitEnded waits until a has ended.
func (rt *Runtime) waitEnded(ctx context.Context, a *activation) error {
	for {
		rt.endMu.Lock()
		if a.ended.Load() {
			rt.endMu.Unlock()
			return nil
		}
		if rt.endCh == nil {
			rt.endCh = make(chan struct{})
		}
		ch := rt.endCh
		rt.endMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "deactivate %s: waiting for it to end", a.key)
		}
	}
}

// ended marks a as ended and wakes waitEnded.
func (rt *Runtime) noteEnded(a *activation) {
	a.ended.Store(true)
	rt.endMu.Lock()
	if rt.endCh != nil {
		close(rt.endCh)
		rt.endCh = nil
	}
	rt.endMu.Unlock()
}

// forward sends msg to the silo that owns it. A request without a deadline
// gets the runtime's AskTimeout from now, when it was sent (Unix ns; 0: the
// clock is read).
func (rt *Runtime) forward(ctx context.Context, silo string, msg *Message, hops int, now int64) (*Message, error) {
	if msg.Kind == KindRequest {
		if _, ok := ctx.Deadline(); !ok {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			if ctx == context.Background() {
				// The common case: a shared deadline, no timer per call,
				// and one context per tick, not per call.
				ctx = rt.backgroundDeadline(now + int64(rt.cfg.AskTimeout))
			} else if ctx.Done() == nil {
				ctx = rt.deadlines.Context(ctx, now+int64(rt.cfg.AskTimeout))
			} else {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, rt.cfg.AskTimeout)
				defer cancel()
			}
		}
	}
	r, err := rt.silo.Placement.Forward(ctx, silo, toWire(msg), hops)
	return fromWire(r), err
}

// tickContext is the context of the forwarded requests without one of their
// own whose default deadline falls in one tick of the shared deadlines.
type tickContext struct {
	tick int64
	ctx  context.Context
}

// backgroundDeadline returns a context.Background() with the shared
// deadline of the tick of at (Unix ns): the same context for every call due
// in that tick (they are all equal), so a forwarded request of a caller
// without a context of its own allocates none.
func (rt *Runtime) backgroundDeadline(at int64) context.Context {
	tick := (at + deadline.Tick - 1) / deadline.Tick
	if c := rt.lastTick.Load(); c != nil && c.tick == tick {
		return c.ctx
	}
	c := &tickContext{tick: tick, ctx: rt.deadlines.Context(context.Background(), at)}
	rt.lastTick.Store(c)
	return c.ctx
}

// reroute delivers, in order, the messages left in the mailbox of an
// activation that ended after its address moved away: each is routed again,
// and a request's reply (or error) goes to its waiting caller.
func (rt *Runtime) reroute(envs []*envelope) {
	for _, env := range envs {
		ctx, cancel := env.ctx, context.CancelFunc(nil)
		if ctx == nil {
			ctx, cancel = context.WithTimeout(rt.base, rt.cfg.AskTimeout)
		}
		if env.expired != nil {
			outer := cancel
			var inner context.CancelFunc
			ctx, inner = context.WithDeadline(ctx, env.deadline)
			cancel = inner
			if outer != nil {
				cancel = func() { inner(); outer() }
			}
		}
		err := rt.routeThen(ctx, env, 0, cancel)
		if err != nil && env.isRequest() {
			env.complete(result{err: err})
		}
		if err != nil && !env.isRequest() {
			rt.logger.Debug("message lost in a move", "to", env.msg.To, "err", err)
		}
	}
}

// route delivers env (already prepared) to its address's owner: here, or
// through the placement to another silo, routing again when the address
// moves meanwhile (siloapi.ErrMoved). A request forwarded elsewhere gets its reply
// sent to env.reply.
func (rt *Runtime) route(ctx context.Context, env *envelope, hops int) error {
	return rt.routeThen(ctx, env, hops, nil)
}

// routeThen is route, calling release (if not nil) once it no longer uses
// ctx: when it returns, or, for a request forwarded from a goroutine of its
// own, when that is done.
func (rt *Runtime) routeThen(ctx context.Context, env *envelope, hops int, release func()) error {
	p := rt.silo.Placement
	for i := 0; ; i++ {
		if silo := p.Route(env.msg.To); silo != "" {
			if !env.isRequest() {
				_, err := rt.forward(ctx, silo, env.msg, hops, env.now)
				if errors.Is(err, siloapi.ErrMoved) && i < maxReroutes {
					continue
				}
				if release != nil {
					release()
				}
				return err
			}
			go func() {
				if release != nil {
					defer release()
				}
				for j := i; ; j++ {
					r, err := rt.forward(ctx, silo, env.msg, hops, env.now)
					if errors.Is(err, siloapi.ErrMoved) && j < maxReroutes {
						if silo = p.Route(env.msg.To); silo != "" {
							continue
						}
						// Moved here: delivered as any message for here.
						if err = rt.deliver(ctx, nil, env); err == nil {
							return
						}
					}
					env.complete(result{msg: r, err: err})
					return
				}
			}()
			return nil
		}
		err := rt.deliver(ctx, nil, env)
		if !errors.Is(err, siloapi.ErrMoved) || i == maxReroutes {
			if release != nil {
				release()
			}
			rt.refused(env.msg, err)
			return err
		}
	}
}

// siloRuntime is rt's silo-only API (package siloapi).
type siloRuntime struct{ rt *Runtime }

func (s siloRuntime) AskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error) {
	r, err := s.rt.askRemote(ctx, fromWire(msg), hops)
	return toWire(r), err
}

func (s siloRuntime) SendRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) error {
	return s.rt.sendRemote(ctx, fromWire(msg), hops)
}

func (s siloRuntime) AskRemoteAsync(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, done func(*agentsilov1.AgentMessage, error)) {
	s.rt.askRemoteAsync(ctx, fromWire(msg), hops, done)
}

func (s siloRuntime) TryAskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, owned bool, done func(*agentsilov1.AgentMessage, error)) bool {
	return s.rt.tryAskRemote(ctx, fromWire(msg), hops, owned, done)
}

func (s siloRuntime) Rehome(ctx context.Context, keep func(key string) bool) error {
	return s.rt.rehome(ctx, keep)
}

func (s siloRuntime) Release(ctx context.Context, key string) error { return s.rt.release(ctx, key) }

// siloSlot is the siloapi.Slot embedded in Config, where a silo puts its
// Wiring (siloapi.Wire) for New to take: under this name, users cannot
// reach it.
type siloSlot = siloapi.Slot

// siloHandle is the siloapi.Handle embedded in Runtime, where New puts its
// siloRuntime for the silo to take (siloapi.Of): under this name, users
// cannot reach it.
type siloHandle = siloapi.Handle

var (
	_ siloapi.Slotted = (*Config)(nil)
	_ siloapi.Handled = (*Runtime)(nil)
)
