package grain

import (
	"errors"
	"runtime"
	"runtime/debug"
	"sync"
)

// mailbox is the queue of one activation, run by the runtime's dispatcher
// (dispatcher.go) or, for a local Ask to an idle activation, by the asking
// goroutine (runInline). It is built for what agentsilo needs:
//
//   - it is bounded with backpressure: post waits for room under the sender's
//     context instead of dropping or spinning;
//   - it costs little while idle (no ring buffer kept, no goroutine, no
//     process registry entry), since a silo holds many idle activations.
//
// It can also be closed and drained, so the messages that arrive while an
// activation deactivates are handed to the next activation in order.
//
// The mailbox runs its messages through its activation's receive, one at a
// time: the activation is its own process. (The runtime used to spawn a
// protoactor-go actor per activation for this; its process registry entry
// and actor context were half of an idle activation's memory, and its
// lifecycle messages did nothing the runtime needed.)
//
// Lock order: directory shard, then mailbox.mu.
type mailbox struct {
	mu      sync.Mutex
	user    []any // user[head:] are queued
	head    int32
	limit   int32
	running bool
	closed  bool
	held    bool          // queue but do not run until start
	waiting chan struct{} // closed when room frees up; made when a sender waits

	act *activation // the mailbox's own; runs its messages
}

// errClosed means the activation is gone; the sender looks it up again.
var errClosed = errors.New("grain: activation closed")

// errGaveUp means the sender stopped waiting for room.
var errGaveUp = errors.New("grain: sender gave up waiting for room")

// post queues a user message, waiting for room while the mailbox is full
// until done is closed (then it returns errGaveUp).
func (m *mailbox) post(done <-chan struct{}, msg any) error {
	m.mu.Lock()
	for {
		if m.closed {
			m.mu.Unlock()
			return errClosed
		}
		if int32(len(m.user))-m.head < m.limit {
			break
		}
		if m.waiting == nil {
			m.waiting = make(chan struct{})
		}
		ch := m.waiting
		m.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return errGaveUp
		}
		m.mu.Lock()
	}
	m.user = append(m.user, msg)
	m.scheduleLocked()
	m.mu.Unlock()
	return nil
}

// claim makes the caller the mailbox's runner if the mailbox is idle: not
// running, not held, not closed, no message queued. The caller then runs its
// message with runInline, which gives the run back.
func (m *mailbox) claim() bool {
	m.mu.Lock()
	ok := !m.running && !m.held && !m.closed && int32(len(m.user)) == m.head
	if ok {
		m.running = true
	}
	m.mu.Unlock()
	return ok
}

// runInline runs msg on the caller's goroutine, as run would have run it
// next. The caller claimed the mailbox. What arrived meanwhile is handed to
// the dispatcher, in order.
func (m *mailbox) runInline(msg any) {
	m.receive(msg)
	m.mu.Lock()
	if int32(len(m.user)) > m.head {
		m.act.rt.dispatcher.scheduleRun(m)
	} else {
		m.running = false
	}
	m.mu.Unlock()
}

// receive hands one message to the activation. A panic here is a bug of the
// runtime (an agent's panics are recovered around its handlers, see
// activation.invoke): it is logged, and the mailbox goes on with its next
// message.
func (m *mailbox) receive(msg any) {
	defer func() {
		if r := recover(); r != nil {
			m.act.rt.logger.Error("grain: mailbox message panicked", "agent", m.act.key, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	m.act.receive(msg)
}

// PostUserMessage queues a message without a bound: the runtime's path for
// internal messages (timer ticks, deactivation) that must not wait behind
// application traffic, and for messages moved from an ended activation.
func (m *mailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	if !m.closed {
		m.user = append(m.user, msg)
		m.scheduleLocked()
	}
	m.mu.Unlock()
}

// start lets a held mailbox run what it queued meanwhile.
func (m *mailbox) start() {
	m.mu.Lock()
	m.held = false
	if int32(len(m.user)) > m.head {
		m.scheduleLocked()
	}
	m.mu.Unlock()
}

// UserMessageCount returns the number of queued messages.
func (m *mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.user) - int(m.head)
}

func (m *mailbox) scheduleLocked() {
	if !m.running && !m.held {
		m.running = true
		m.act.rt.dispatcher.scheduleRun(m)
	}
}

// run processes messages until the mailbox is empty.
func (m *mailbox) run() {
	throughput := m.act.rt.dispatcher.throughput
	for i := 0; ; i++ {
		if i >= throughput {
			i = 0
			runtime.Gosched()
		}
		m.mu.Lock()
		if int32(len(m.user)) == m.head {
			m.running = false
			m.mu.Unlock()
			return
		}
		msg := m.user[m.head]
		m.user[m.head] = nil
		m.head++
		if m.head == int32(len(m.user)) {
			m.resetLocked()
		}
		if m.waiting != nil {
			close(m.waiting)
			m.waiting = nil
		}
		m.mu.Unlock()
		m.receive(msg)
	}
}

// resetLocked empties the queue, keeping a small buffer for the next burst
// and dropping a large one so an idle activation stays small.
func (m *mailbox) resetLocked() {
	if cap(m.user) > 16 {
		m.user = nil
	} else {
		m.user = m.user[:0]
	}
	m.head = 0
}

// close stops the mailbox taking user messages and returns those still
// queued, in order. Senders waiting for room get errClosed.
func (m *mailbox) close() []any {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	rest := append([]any(nil), m.user[m.head:]...)
	m.user, m.head = nil, 0
	if m.waiting != nil {
		close(m.waiting)
		m.waiting = nil
	}
	return rest
}
