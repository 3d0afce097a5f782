package grain

import (
	"sync"
	"time"
)

// Interleaving skills. A type may declare skills whose requests run even
// while its agent is in a turn (Skill.Interleave), as Orleans'
// [AlwaysInterleave] methods do: a model agent's turn runs for minutes,
// and its conversation is read meanwhile. Such a request:
//
//   - runs at once, beside the turn in progress and any other interleaving
//     request, as a free turn that never takes the activation's exec (see
//     turn.go): on the sender's goroutine when the sender waits for the
//     reply (a local Ask), else on a goroutine of its own (a request
//     another silo forwarded: the transport that hands it over keeps its
//     sender's order and must not wait for a handler);
//   - is no turn of the mailbox: it takes no place in the queue, so it may
//     overtake messages its sender sent before it that still wait there,
//     and a request of its call chain that comes back to the agent is not
//     re-entrant (it queues, or interleaves if it is for such a skill too);
//   - runs only in an activation whose OnActivate returned, and not once a
//     deactivation was asked for (a pending one included) or the agent
//     failed (a panic, Host.Deactivate): then it queues in the mailbox as
//     any message does, to run as a turn of this activation or the next;
//   - is bounded per activation by the mailbox size: beyond that many
//     running at once, more queue in the mailbox;
//   - is otherwise a request as any other: the sender's ACL check (made
//     before delivery), the deadline and cancellation of its context, the
//     size limit, the silo's serving check, its idempotency key, the
//     observer and the trace span. It counts as activity for the idle
//     timeout.
//
// An activation's end (finish) first stops them from running and waits
// for those that run to return, before OnDeactivate: no interleaving
// request runs once the deactivation has begun, and a moved agent's
// activations never overlap, whatever ran in them.
//
// A local Ask for such a skill that finds the activation idle runs as an
// ordinary turn (mailbox.claim): the cheaper way, and the stronger.
//
// Only types with interleaving skills pay for them: their activations
// carry the interleaves flag (in what was padding), and their bookkeeping
// lives beside them, in Runtime.interleaved; a message to any other type
// costs a test of that flag.

// interleaving is the bookkeeping of one activation of a type with
// interleaving skills.
type interleaving struct {
	skills map[string]struct{} // the type's interleaving skills; shared, read-only

	mu      sync.Mutex
	ready   bool          // OnActivate returned: requests may run
	ending  bool          // the activation's end began: none may run
	running int32         // requests running now
	drained chan struct{} // made by the end while some run; closed by the last to leave
}

// interleavingOf returns a's bookkeeping if msg is a request for one of
// its type's interleaving skills, else nil.
func (a *activation) interleavingOf(msg *Message) *interleaving {
	if msg.Kind != KindRequest || msg.MessageType == "" {
		return nil
	}
	v, ok := a.rt.interleaved.Load(a)
	if !ok {
		return nil
	}
	il := v.(*interleaving)
	if _, ok := il.skills[msg.MessageType]; !ok {
		return nil
	}
	return il
}

// interleave runs env at once if it is a request for an interleaving
// skill that a may run now, and reports whether it did (or handed it to a
// goroutine that will); false leaves env to the mailbox.
func (a *activation) interleave(env *envelope) bool {
	if !env.isRequest() {
		return false
	}
	il := a.interleavingOf(env.msg)
	if il == nil || !il.enter(a) {
		return false
	}
	if env.reply == nil {
		go a.runInterleaved(il, env) // the sender does not wait here (env.done)
		return true
	}
	a.runInterleaved(il, env)
	return true
}

// enter counts one more running request if a may run one now.
func (il *interleaving) enter(a *activation) bool {
	il.mu.Lock()
	ok := il.ready && !il.ending && il.running < a.mb.limit && a.deactivate.Load() == 0 && a.failed.Load() == 0
	if ok {
		il.running++
	}
	il.mu.Unlock()
	return ok
}

// leave counts a request that returned, waking the activation's end if it
// waits for the last one.
func (il *interleaving) leave() {
	il.mu.Lock()
	il.running--
	if il.running == 0 && il.drained != nil {
		close(il.drained)
		il.drained = nil
	}
	il.mu.Unlock()
}

// runInterleaved runs env, a request that entered il, as a free turn, and
// answers it.
func (a *activation) runInterleaved(il *interleaving, env *envelope) {
	defer il.leave()
	parent := env.ctx
	if parent == nil {
		parent = a.rt.base
	}
	a.lastActive.Store(a.rt.now.Load())
	if err := a.rt.awaitServing(parent); err != nil {
		a.respond(env, nil, err)
		return
	}
	t := &turn{Context: parent, act: a, chain: env.msg.chain, expired: env.expired, deadline: env.deadline, msg: env.msg, free: true}
	var start time.Time
	if a.rt.cfg.Observer != nil {
		start = time.Now()
	}
	reply, err := a.invoke(t, env.msg)
	if a.rt.cfg.Observer != nil {
		a.handled(env.msg, err, start)
	}
	a.respond(env, reply, err)
	if r := a.failed.Load(); r != 0 {
		// It panicked or called Deactivate: the activation ends after
		// the turn in progress, as it would after a turn of its own.
		a.requestDeactivation(Reason(r))
	}
}

// interleavingReady lets a's interleaving requests run: its OnActivate
// returned. The first turn calls it, holding exec.
func (a *activation) interleavingReady() {
	if v, ok := a.rt.interleaved.Load(a); ok {
		il := v.(*interleaving)
		il.mu.Lock()
		il.ready = true
		il.mu.Unlock()
	}
}

// endInterleaving stops a's interleaving requests from running and waits
// for those running to return. finish calls it first.
func (a *activation) endInterleaving() {
	v, ok := a.rt.interleaved.LoadAndDelete(a)
	if !ok {
		return
	}
	il := v.(*interleaving)
	il.mu.Lock()
	il.ending = true
	var drained chan struct{}
	if il.running > 0 {
		drained = make(chan struct{})
		il.drained = drained
	}
	il.mu.Unlock()
	if drained != nil {
		<-drained
	}
}
