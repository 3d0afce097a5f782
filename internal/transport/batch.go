package transport

import (
	"runtime"
	"sync"
	"sync/atomic"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// batcher fills stream messages from a queue.
type batcher struct {
	t     *Transport
	batch *agentsilov1.PeerBatch
	bytes int
	taken int // items of the batch taken from the queue, skipped ones included
}

// fill starts a batch with it, just taken from q, and adds what else is
// queued, up to MaxBatch envelopes and about MaxMessageSize bytes (an
// envelope that would go past that stays queued for the next batch).
// Requests whose caller gave up are skipped. If nothing else is queued yet,
// it yields once first (no timer, no wait: with nothing else runnable it
// returns at once), so that callers that are about to queue join the batch;
// under load that is what turns one stream message per envelope into
// batches.
func (w *batcher) fill(it item, q *queue[item]) {
	w.batch.Envelopes = w.batch.Envelopes[:0]
	w.bytes = 0
	w.taken = 0
	w.add(it)
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		runtime.Gosched()
		q.mu.Lock()
	}
	for len(w.batch.Envelopes) < w.t.cfg.MaxBatch {
		next, ok := q.peekLocked()
		if !ok || (len(w.batch.Envelopes) > 0 && w.bytes+next.size > w.t.cfg.MaxMessageSize) {
			break
		}
		q.popLocked()
		w.add(next)
	}
	q.endTakeLocked()
	q.mu.Unlock()
}

func (w *batcher) add(it item) {
	w.taken++
	if it.call != nil && (it.call.finished.Load() || !it.call.fate.CompareAndSwap(callQueued, callWritten)) {
		return
	}
	w.batch.Envelopes = append(w.batch.Envelopes, it.env)
	w.bytes += it.size
}

// flush sends the batch, if it is not empty.
func (w *batcher) flush(send func(*agentsilov1.PeerBatch) error) error {
	n := len(w.batch.Envelopes)
	if n == 0 {
		return nil
	}
	w.t.count(n)
	err := send(w.batch)
	clear(w.batch.Envelopes)
	return err
}

// writer serializes the writes to one stream, and lets a goroutine with one
// envelope to send write it itself when nothing is queued ahead of it and no
// one else is writing: at low load an envelope then costs no hand-off to the
// stream's sender goroutine, which only drains what queued while a write was
// under way (in batches, as before). The order of the queue is kept: a
// direct write happens only when no envelope is queued or held by the
// sender, and every write holds mu.
type writer struct {
	mu     sync.Mutex                         // held while writing to the stream
	send   func(*agentsilov1.PeerBatch) error // nil while there is no stream to write to; guarded by mu
	broken func()                             // ends the stream after a failed direct write; guarded by mu
	one    agentsilov1.PeerBatch              // the batch of a direct write; guarded by mu
	queued atomic.Int64                       // envelopes queued or held by the sender goroutine, not yet written
	writes uint64                             // stream messages written, direct or not; guarded by mu (idleness)
	hook   func()                             // test hook, called before a direct write
}

// open sets the stream the writer writes to; broken ends it.
func (w *writer) open(send func(*agentsilov1.PeerBatch) error, broken func()) {
	w.mu.Lock()
	w.send, w.broken = send, broken
	w.mu.Unlock()
}

// shut stops direct writes: the stream is gone, or about to be.
func (w *writer) shut() {
	w.mu.Lock()
	w.send, w.broken = nil, nil
	w.mu.Unlock()
}

// direct writes it to the stream on the calling goroutine and returns true
// if the stream is open, nothing is queued and no one is writing; otherwise
// it returns false, having done nothing, and it should be queued. A request
// whose call has ended is not written (but true is returned: it is done
// with). A failed write ends the stream, whose reader and sender then see it
// fail.
func (w *writer) direct(t *Transport, it item) bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	if w.send == nil || !w.queued.CompareAndSwap(0, 1) {
		return false
	}
	defer w.queued.Add(-1)
	if w.hook != nil {
		w.hook()
	}
	if it.call != nil && (it.call.finished.Load() || !it.call.fate.CompareAndSwap(callQueued, callWritten)) {
		return true
	}
	w.one.Envelopes = append(w.one.Envelopes[:0], it.env)
	t.count(1)
	w.writes++
	err := w.send(&w.one)
	w.one.Envelopes[0] = nil
	if err != nil {
		w.broken()
		w.send = nil
	}
	return true
}
