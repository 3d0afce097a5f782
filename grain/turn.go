package grain

import (
	"context"
	"sync"
	"time"
)

// A turn is one message being handled by an activation, and the context its
// handler runs with.
//
// Turn-based execution and call-chain reentrancy rest on one lock per
// activation, exec, held while the activation's code runs:
//
//   - a turn takes exec when it starts and gives it back when it ends;
//   - an Ask made with a turn's context gives exec back while it waits (on the
//     turn's first outstanding Ask) and takes it again when the turn's last
//     outstanding Ask returns;
//   - a REQUEST of the call chain of the activation's current turn, arriving
//     while that turn waits in Ask, does not queue behind it in the mailbox:
//     it runs at once, on the sender's goroutine, as a nested turn that takes
//     exec like any other.
//
// A request for an interleaving skill (Skill.Interleave) is the one
// exception to "one at a time": it runs beside the turn in progress, as a
// free turn (free set) that never takes exec, on the sender's goroutine
// (see interleave.go). Its Asks leave exec alone.
//
// Other messages queue in the mailbox, whose runner is the one waiting in
// the turn, so they wait their turn. The runner is a dispatcher goroutine,
// or, for a local Ask to an idle activation, the asking goroutine itself
// (mailbox.runInline): it would only wait for the reply, so it runs the turn
// instead of handing it to another goroutine and back. The handler code of one activation thus
// never runs on two goroutines at once, unless the handler itself starts
// goroutines.
//
// turn.mu guards waiting and done; it is taken before exec, never after.
type turn struct {
	context.Context
	act   *activation
	chain string
	// A request without a deadline of its own gets the default one from the
	// runtime's shared deadlines; then expired and deadline override the
	// parent's Done and Deadline (whose Done is nil then).
	expired  <-chan struct{}
	deadline time.Time
	// msg is the message being handled: the messages sent from the turn
	// inherit its traceparent (see prepare). A pointer, not a copy of the
	// string, keeps a turn in the 96-byte size class.
	msg *Message

	mu      sync.Mutex
	waiting int32 // outstanding Asks made with this turn's context
	done    bool  // the handler returned
	// free: an interleaving request's turn, which holds no exec (and is
	// never begun or ended); set when the turn is made.
	free bool
}

type turnKey struct{}

// Value returns the turn itself for turnKey, and defers to the parent context
// otherwise.
func (t *turn) Value(key any) any {
	if key == (turnKey{}) {
		return t
	}
	return t.Context.Value(key)
}

// Deadline implements context.Context.
func (t *turn) Deadline() (time.Time, bool) {
	if t.expired != nil {
		return t.deadline, true
	}
	return t.Context.Deadline()
}

// Done implements context.Context.
func (t *turn) Done() <-chan struct{} {
	if t.expired != nil {
		return t.expired
	}
	return t.Context.Done()
}

// Err implements context.Context.
func (t *turn) Err() error {
	if t.expired != nil {
		select {
		case <-t.expired:
			return context.DeadlineExceeded
		default:
			return nil
		}
	}
	return t.Context.Err()
}

// turnFrom returns the turn whose context ctx is (or derives from), or nil.
func turnFrom(ctx context.Context) *turn {
	if t, ok := ctx.(*turn); ok {
		return t
	}
	t, _ := ctx.Value(turnKey{}).(*turn)
	return t
}

// begin takes exec for the turn.
func (t *turn) begin() { t.act.exec.Lock() }

// end gives exec back, unless an Ask outlives the handler (a goroutine the
// handler started), in which case exec was given back when that Ask started.
func (t *turn) end() {
	t.mu.Lock()
	t.done = true
	if t.waiting == 0 {
		t.act.exec.Unlock()
	} else {
		t.act.waiters.Add(-1)
	}
	t.mu.Unlock()
}

// beginWait is called before an Ask made with the turn's context sends.
func (t *turn) beginWait() {
	t.mu.Lock()
	if !t.done {
		t.waiting++
		if t.waiting == 1 {
			t.act.waiters.Add(1)
			t.act.exec.Unlock()
		}
	}
	t.mu.Unlock()
}

// endWait is called when that Ask returns.
func (t *turn) endWait() {
	t.mu.Lock()
	if !t.done {
		t.waiting--
		if t.waiting == 0 {
			t.act.exec.Lock()
			t.act.waiters.Add(-1)
		}
	}
	t.mu.Unlock()
}
