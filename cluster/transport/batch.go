package transport

import (
	"runtime"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// batcher fills stream messages from a queue.
type batcher struct {
	t     *Transport
	batch *agentsilov1.PeerBatch
	bytes int
	carry item // taken from the queue but left for the next batch
}

// fill starts a batch with it and adds what else is queued, up to MaxBatch
// envelopes and about MaxMessageSize bytes. Requests whose caller gave up are
// skipped. If nothing else is queued yet, it yields once first (no timer,
// no wait: with nothing else runnable it returns at once), so that callers
// that are about to queue join the batch; under load that is what turns one
// stream message per envelope into batches.
func (w *batcher) fill(it item, q chan item) {
	w.batch.Envelopes = w.batch.Envelopes[:0]
	w.bytes = 0
	w.add(it)
	if len(q) == 0 {
		runtime.Gosched()
	}
	for len(w.batch.Envelopes) < w.t.cfg.MaxBatch {
		select {
		case it := <-q:
			if len(w.batch.Envelopes) > 0 && w.bytes+it.size > w.t.cfg.MaxMessageSize {
				w.carry = it
				return
			}
			w.add(it)
		default:
			return
		}
	}
}

func (w *batcher) add(it item) {
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
