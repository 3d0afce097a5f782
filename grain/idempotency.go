package grain

import (
	"context"
	"sync"
	"time"
	"weak"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Idempotency keys of Send, Event and Ask (Message.IdempotencyKey).
//
// The runtime of the silo that hosts the receiver remembers each (receiver,
// key) it queued, for Config.IdempotencyWindow and up to
// Config.IdempotencyKeys of them (the oldest forgotten first). Within that,
// a message with a key already seen is not handed to the receiver again: a
// one-way message or event is dropped (its Send succeeds), and a request
// gets the first one's reply (or error), waiting for it if the first is
// still in its turn. The memory is the silo's: a receiver that moves to
// another silo, or a silo that restarts, starts afresh. (Publishes remember
// their keys durably: see package topics.)
//
// A reply marked Provisional is not kept either: the duplicates waiting
// for it get it, and a later retry reaches the receiver again.
//
// Transient failures of the first (Unavailable, DeadlineExceeded, Canceled,
// ResourceExhausted: it may not have run) are forgotten, so that a retry
// runs, unless the first's turn saved the agent's state:
//
//   - a save that landed is remembered: the first caller's error says that
//     the state change landed, and a retry gets ErrApplied (AlreadyExists)
//     saying so, without running again;
//   - a save whose outcome is unknown (etcd lost mid-write) is remembered
//     as unknown: a retry first asks the store (KeyedStateStore.Applied)
//     whether it landed, and gets ErrApplied if it did, else runs.
//
// With a KeyedStateStore (package state's etcd store), a save made in the
// turn of a keyed message also records the key in the same write, and is
// refused with ErrApplied if the key is recorded already: so a retry that
// runs anyway (on another silo, after a restart, or once the silo forgot)
// cannot apply its change twice.

// ErrApplied is the error of a save, or of a retried request, under an
// idempotency key whose change an earlier attempt saved already: nothing
// was run or written again. It is errs.ErrAlreadyExists (gRPC
// AlreadyExists).
var ErrApplied = errs.ErrAlreadyExists

// KeyedStateStore is a StateStore that records, in the same write as a
// save, the idempotency key of the message whose turn made it, for at
// least the runtime's IdempotencyWindow. The runtime uses it for every save
// made in the turn of a message with a key. Its methods are called
// concurrently, from any goroutine.
type KeyedStateStore interface {
	StateStore
	// SaveKeyed is Save, recording key for addr in the same write. If key
	// is recorded for addr already, it writes nothing and returns an error
	// that errors.Is ErrApplied.
	SaveKeyed(ctx context.Context, addr Address, data []byte, etag, key string) (newETag string, err error)
	// Applied reports whether a save under key landed for addr (within
	// the window), and the etag that save made.
	Applied(ctx context.Context, addr Address, key string) (etag string, ok bool, err error)
}

// idemCache is a runtime's memory of idempotency keys.
type idemCache struct {
	window time.Duration
	max    int

	mu    sync.Mutex
	m     map[string]*idemEntry
	order []*idemEntry // by time of first sight; head is the oldest kept
	head  int
}

// idemEntry is one key seen: its first message's result, once known.
type idemEntry struct {
	c    *idemCache
	key  string
	at   int64         // Unix ns of first sight
	done chan struct{} // closed when r is set
	r    result

	// What the first message's turn saved (see saveKeyed), guarded by mu.
	mu    sync.Mutex
	wrote int    // wroteNone, wroteLanded or wroteUnknown
	etag  string // the etag of the save that landed
	store KeyedStateStore
	rt    *Runtime
	addr  Address
}

// What a keyed turn's saves did.
const (
	wroteNone    = iota
	wroteLanded  // a save landed
	wroteUnknown // a save failed without saying whether it landed
)

func (c *idemCache) init(window time.Duration, max int) {
	c.window, c.max, c.m = window, max, make(map[string]*idemEntry)
}

// begin records key, seen at now, and returns its entry; dup is true if it
// was seen within the window already.
func (c *idemCache) begin(key string, now int64) (e *idemEntry, dup bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.head < len(c.order) {
		old := c.order[c.head]
		if len(c.m) < c.max && now-old.at < int64(c.window) {
			break
		}
		if c.m[old.key] == old {
			delete(c.m, old.key)
		}
		c.order[c.head] = nil
		c.head++
	}
	if c.head > len(c.order)/2 && c.head > 64 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
	if e := c.m[key]; e != nil {
		return e, true
	}
	e = &idemEntry{c: c, key: key, at: now, done: make(chan struct{})}
	c.m[key] = e
	c.order = append(c.order, e)
	return e, false
}

// lookup returns key's entry if its first message is still in its turn.
func (c *idemCache) lookup(key string) *idemEntry {
	c.mu.Lock()
	e := c.m[key]
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-e.done:
		return nil
	default:
		return e
	}
}

// finish records the first message's result, wakes the duplicates waiting
// for it, and returns the result for the first message's own caller. A
// transient failure is forgotten, so that a retry runs, unless the turn
// saved state (see the rules at the top of this file); the error of a turn
// that saved says so.
func (e *idemEntry) finish(r result) result {
	if r.msg != nil {
		r.msg = r.msg.Clone()
	}
	e.mu.Lock()
	wrote, etag, keyed := e.wrote, e.etag, e.store != nil
	e.mu.Unlock()
	transient := false
	switch errs.Code(r.err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		transient = true
	}
	first := r
	switch {
	case r.err == nil || wrote == wroteNone && !transient:
	case wrote == wroteLanded:
		first.err = errs.Wrap(errs.Code(r.err), r.err, "the turn ran and its state change landed (etag %s) before it failed; a retry with idempotency key %q will not run it again", etag, e.keyOnly())
		r = first
		if transient {
			r = result{err: e.applied(etag)}
		}
	case wrote == wroteUnknown:
		first.err = errs.Wrap(errs.Code(r.err), r.err, "the turn ran and its state change may have landed (its save's outcome is unknown)")
		r = first
	}
	e.r = r
	provisional := r.err == nil && r.msg != nil && r.msg.State[StateProvisional] != ""
	if provisional || transient && (wrote == wroteNone || wrote == wroteUnknown && !keyed) {
		e.forget()
	}
	close(e.done)
	return first
}

// forget drops e from its cache, if it is still the entry of its key.
func (e *idemEntry) forget() {
	e.c.mu.Lock()
	if e.c.m[e.key] == e {
		delete(e.c.m, e.key)
	}
	e.c.mu.Unlock()
}

// keyOnly is the idempotency key of e, without its receiver.
func (e *idemEntry) keyOnly() string {
	for i := 0; i < len(e.key); i++ {
		if e.key[i] == 0 {
			return e.key[i+1:]
		}
	}
	return e.key
}

// applied is the error a retry gets once the first's save is known to have
// landed.
func (e *idemEntry) applied(etag string) error {
	return errs.Wrap(codes.AlreadyExists, ErrApplied, "a request with idempotency key %q already ran and its state change landed (etag %s); its reply was lost, and it is not run again", e.keyOnly(), etag)
}

// noteSave records what a save made in the turn of e's first message did.
func (e *idemEntry) noteSave(a *activation, ks KeyedStateStore, etag string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err == nil:
		e.wrote, e.etag = wroteLanded, etag
	case e.wrote == wroteLanded:
	case outcomeUnknown(err):
		e.wrote, e.store, e.rt, e.addr = wroteUnknown, ks, a.rt, a.address()
	}
}

// saveKeyed is StateStore.Save for a's SaveState: in the turn of a message
// with an idempotency key, the save records the key (KeyedStateStore) and
// what it did is noted for the key's retries. A save with the etag of a
// keyed save refused as applied already is a conflict: the agent's value
// holds a change that was not stored, and must be loaded again.
func (a *activation) saveKeyed(ctx context.Context, st StateStore, data []byte, etag string) (string, error) {
	c := a.cursor()
	if c.refused != "" && etag == c.refused {
		return "", errs.New(codes.Aborted, "the state of %s: a change under an idempotency key was refused at etag %s as applied already, so the value at hand is not the stored one; load it again", a.key, etag)
	}
	t := turnFrom(ctx)
	if t == nil || t.act != a || t.msg == nil || t.msg.IdempotencyKey == "" {
		return a.save(ctx, st, nil, data, etag, "")
	}
	ks, _ := st.(KeyedStateStore)
	key := ""
	if ks != nil && c.keyedTurn.Value() != t {
		key = t.msg.IdempotencyKey
	}
	next, err := a.save(ctx, st, ks, data, etag, key)
	if err == nil && key != "" {
		// The key is recorded: the turn's later saves are plain ones.
		// (After a save whose outcome stays unknown, the next save finds
		// out first: see resolve.)
		c.keyedTurn = weak.Make(t)
	}
	if errs.Code(err) == codes.AlreadyExists {
		c.refused = etag
	}
	if e := a.rt.idem.lookup(idemKey(t.msg)); e != nil {
		e.noteSave(a, ks, next, err)
	}
	return next, err
}

// idemKey is the cache key of msg: its receiver and key.
func idemKey(msg *Message) string { return msg.To + "\x00" + msg.IdempotencyKey }

// answerDuplicate completes env, a duplicate of e's message: at once if e's
// result is known, else when it is (or when env's caller gives up). If the
// first's save has an unknown outcome, the store is asked whether it
// landed: if it did not, env runs as a first.
func answerDuplicate(e *idemEntry, env *envelope) {
	if !env.isRequest() {
		return
	}
	reply := func() {
		r := e.r
		if r.msg != nil {
			m := r.msg.Clone()
			m.CorrelationID = env.msg.ID
			r.msg = m
		}
		env.complete(r)
	}
	select {
	case <-e.done:
		if e.unresolved() {
			go resolveDuplicate(e, env)
			return
		}
		reply()
		return
	default:
	}
	var gaveUp <-chan struct{}
	if env.expired != nil {
		gaveUp = env.expired
	} else if env.ctx != nil {
		gaveUp = env.ctx.Done()
	}
	go func() {
		select {
		case <-e.done:
			if e.unresolved() {
				resolveDuplicate(e, env)
				return
			}
			reply()
		case <-gaveUp:
			env.complete(result{err: errs.New(codes.DeadlineExceeded, "ask %s: deadline exceeded waiting for the first request with its idempotency key: this one did not run; the first may have run", env.msg.To)})
		}
	}()
}

// unresolved reports whether e's first message failed after a save whose
// outcome is unknown, not yet resolved. Call it once e.done is closed.
func (e *idemEntry) unresolved() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wrote == wroteUnknown && e.store != nil
}

// resolveDuplicate asks the store whether the save of e's first message
// landed: if so env gets ErrApplied (and so do later duplicates), if not e
// is forgotten and env runs as a first message. If the store cannot tell,
// env fails with Unavailable, not run.
func resolveDuplicate(e *idemEntry, env *envelope) {
	ctx := env.ctx
	switch {
	case env.expired != nil:
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(e.rt.base, env.deadline)
		defer cancel()
	case ctx == nil:
		ctx = e.rt.base
	}
	if r, done := e.resolve(ctx, env.msg.To); done {
		env.complete(r)
		return
	}
	if err := e.rt.deliver(ctx, nil, env); err != nil {
		env.complete(result{err: err})
	}
}

// resolve finds out whether the save of e's first message landed, once for
// all its duplicates: done is false if it did not, and e is forgotten.
func (e *idemEntry) resolve(ctx context.Context, to string) (r result, done bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.wrote {
	case wroteLanded:
		return result{err: e.applied(e.etag)}, true
	case wroteNone:
		return result{}, false // resolved by another duplicate: it did not land
	}
	etag, ok, err := e.store.Applied(ctx, e.addr, e.keyOnly())
	switch {
	case err != nil:
		return result{err: notRun(errs.Wrap(codes.Unavailable, err, "ask %s: the first request with its idempotency key may have changed the state, and whether it did cannot be told now; not run, retry later", to))}, true
	case ok:
		e.wrote, e.etag = wroteLanded, etag
		e.r = result{err: e.applied(etag)}
		return e.r, true
	}
	e.wrote = wroteNone
	e.forget()
	return result{}, false
}
