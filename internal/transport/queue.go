package transport

import "sync"

// queue is a bounded FIFO queue whose buffer holds what is queued, not its
// bound: it grows on demand up to max entries and is let go once a burst
// that grew it past keepCap has drained, so an idle queue costs a few
// hundred bytes where a channel of the same bound costs all of it. A
// consumer takes entries and, finding none, waits for ready; a producer
// that finds it full waits for room (see put). One consumer at a time.
type queue[T any] struct {
	mu      sync.Mutex
	buf     []T // a ring: n entries from head; len(buf) is its capacity
	head, n int
	max     int
	waiting int // producers waiting for room

	// ready is signalled when the queue goes from empty to not: a
	// consumer that found it empty waits on it (a stale signal only wakes
	// it to look again). room is signalled when entries are taken while
	// producers wait; each one woken passes it on while room is left.
	ready chan struct{}
	room  chan struct{}
}

// firstCap is the capacity a queue's buffer starts with; keepCap, the
// largest it keeps once drained.
const (
	firstCap = 16
	keepCap  = 256
)

func (q *queue[T]) init(max int) {
	q.max = max
	q.ready = make(chan struct{}, 1)
	q.room = make(chan struct{}, 1)
}

// len returns the number of entries queued.
func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// pushLocked adds v; the queue has room.
func (q *queue[T]) pushLocked(v T) {
	if q.n == len(q.buf) {
		c := max(firstCap, 2*len(q.buf))
		if c > q.max {
			c = q.max
		}
		nb := make([]T, c)
		k := copy(nb, q.buf[q.head:])
		copy(nb[k:], q.buf[:q.head])
		q.buf, q.head = nb, 0
	}
	i := q.head + q.n
	if i >= len(q.buf) {
		i -= len(q.buf)
	}
	q.buf[i] = v
	q.n++
	if q.n == 1 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
}

// tryPut adds v if there is room at once.
func (q *queue[T]) tryPut(v T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= q.max {
		return false
	}
	q.pushLocked(v)
	return true
}

// put adds v, waiting for room until done or stop is closed: it returns
// 0 once v is queued, 1 if done was closed first, 2 if stop was. A nil
// done or stop never ends the wait.
func (q *queue[T]) put(v T, done, stop <-chan struct{}) int {
	q.mu.Lock()
	for q.n >= q.max {
		q.waiting++
		q.mu.Unlock()
		var r int
		select {
		case <-q.room:
		case <-done:
			r = 1
		case <-stop:
			r = 2
		}
		q.mu.Lock()
		q.waiting--
		if r != 0 {
			q.mu.Unlock()
			return r
		}
	}
	q.pushLocked(v)
	if q.waiting > 0 && q.n < q.max {
		q.signalRoom()
	}
	q.mu.Unlock()
	return 0
}

func (q *queue[T]) signalRoom() {
	select {
	case q.room <- struct{}{}:
	default:
	}
}

// peekLocked returns the first entry, if any.
func (q *queue[T]) peekLocked() (T, bool) {
	if q.n == 0 {
		var zero T
		return zero, false
	}
	return q.buf[q.head], true
}

// popLocked removes the first entry and returns it; call endTakeLocked
// after the last pop of a turn.
func (q *queue[T]) popLocked() (T, bool) {
	var zero T
	if q.n == 0 {
		return zero, false
	}
	v := q.buf[q.head]
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return v, true
}

// endTakeLocked wakes a producer waiting for room, and lets a buffer a
// burst grew go once the queue is empty.
func (q *queue[T]) endTakeLocked() {
	if q.n == 0 {
		q.head = 0
		if len(q.buf) > keepCap {
			q.buf = nil
		}
	}
	if q.waiting > 0 && q.n < q.max {
		q.signalRoom()
	}
}

// take removes the first entry and returns it, if there is one.
func (q *queue[T]) take() (T, bool) {
	q.mu.Lock()
	v, ok := q.popLocked()
	if ok {
		q.endTakeLocked()
	}
	q.mu.Unlock()
	return v, ok
}

// release lets the buffer of an empty queue go.
func (q *queue[T]) release() {
	q.mu.Lock()
	if q.n == 0 {
		q.buf, q.head = nil, 0
	}
	q.mu.Unlock()
}
