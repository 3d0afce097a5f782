package grain

import (
	"errors"
	"runtime"
	"sync"
)

// mailbox is the protoactor-go Mailbox of one activation (plugged in by
// actor.go). It differs from protoactor's own mailboxes in two ways that
// agentsilo needs:
//
//   - it is bounded with backpressure: post waits for room under the sender's
//     context instead of dropping or spinning;
//   - it costs little while idle (no ring buffer kept), since a silo holds
//     many idle activations.
//
// It can also be closed and drained, so the messages that arrive while an
// activation deactivates are handed to the next activation in order.
//
// Lock order: directory shard, then mailbox.mu.
type mailbox struct {
	mu      sync.Mutex
	user    []any // user[head:] are queued
	head    int32
	limit   int32
	sys     []any
	running bool
	closed  bool
	held    bool          // queue but do not run until start
	waiting chan struct{} // closed when room frees up; made when a sender waits

	invoker    messageInvoker // set by RegisterHandlers (actor.go)
	dispatcher *dispatcher
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
// running, not held, not closed, no user message queued. The caller then
// runs its message with runInline, which gives the run back.
func (m *mailbox) claim() bool {
	m.mu.Lock()
	ok := !m.running && !m.held && !m.closed && m.dispatcher != nil && int32(len(m.user)) == m.head
	if ok {
		m.running = true
	}
	m.mu.Unlock()
	return ok
}

// runInline runs msg on the caller's goroutine, as run would have run it
// next: queued system messages first. The caller claimed the mailbox. What
// arrived meanwhile is handed to the dispatcher, in order.
func (m *mailbox) runInline(msg any) {
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for {
		m.mu.Lock()
		if len(m.sys) == 0 {
			m.mu.Unlock()
			break
		}
		sys := m.sys[0]
		m.sys[0] = nil
		m.sys = m.sys[1:]
		if len(m.sys) == 0 {
			m.sys = nil
		}
		m.mu.Unlock()
		m.invoker.InvokeSystemMessage(sys)
	}
	m.invoker.InvokeUserMessage(msg)
	m.mu.Lock()
	if len(m.sys) > 0 || int32(len(m.user)) > m.head {
		m.dispatcher.scheduleRun(m)
	} else {
		m.running = false
	}
	m.mu.Unlock()
}

// PostUserMessage queues a message without a bound: protoactor's own path,
// and the runtime's for internal messages (timer ticks, deactivation) that
// must not wait behind application traffic.
func (m *mailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	if !m.closed {
		m.user = append(m.user, msg)
		m.scheduleLocked()
	}
	m.mu.Unlock()
}

// PostSystemMessage queues a protoactor system message (Started, Stop, ...).
func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys = append(m.sys, msg)
	m.scheduleLocked()
	m.mu.Unlock()
}

// start lets a held mailbox run what it queued meanwhile. System messages
// alone (protoactor's Started) wait for the first user message, which then
// runs them first, often on its sender's goroutine (runInline): activating
// costs no hand-off.
func (m *mailbox) start() {
	m.mu.Lock()
	m.held = false
	if int32(len(m.user)) > m.head {
		m.scheduleLocked()
	}
	m.mu.Unlock()
}

// Start implements actor.Mailbox.
func (m *mailbox) Start() {}

// UserMessageCount implements actor.Mailbox.
func (m *mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.user) - int(m.head)
}

func (m *mailbox) scheduleLocked() {
	if !m.running && !m.held && m.dispatcher != nil {
		m.running = true
		m.dispatcher.scheduleRun(m)
	}
}

// run processes messages until the mailbox is empty; system messages first.
func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	throughput := m.dispatcher.Throughput()
	for i := 0; ; i++ {
		if i >= throughput {
			i = 0
			runtime.Gosched()
		}
		var sys bool
		m.mu.Lock()
		switch {
		case len(m.sys) > 0:
			msg, sys = m.sys[0], true
			m.sys[0] = nil
			m.sys = m.sys[1:]
			if len(m.sys) == 0 {
				m.sys = nil
			}
		case int32(len(m.user)) > m.head:
			msg = m.user[m.head]
			m.user[m.head] = nil
			m.head++
			if m.head == int32(len(m.user)) {
				m.resetLocked()
			}
			if m.waiting != nil {
				close(m.waiting)
				m.waiting = nil
			}
		default:
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if sys {
			m.invoker.InvokeSystemMessage(msg)
		} else {
			m.invoker.InvokeUserMessage(msg)
		}
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
