package transport

import (
	"sync"
)

// workers runs inbound requests on goroutines that park between requests
// (at most maxIdleWorkers of them), so that a request does not pay for a fresh
// goroutine's stack growth.
type workers struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

const maxIdleWorkers = 128

func (w *workers) run(t *Transport, f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 && !w.closed {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- f
		return
	}
	w.mu.Unlock()
	t.wg.Add(1)
	go w.work(t, f)
}

func (w *workers) work(t *Transport, f func()) {
	defer t.wg.Done()
	ch := make(chan func())
	for f != nil {
		f()
		w.mu.Lock()
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		f = <-ch
	}
}

// close ends the parked workers.
func (w *workers) close() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, ch := range idle {
		close(ch)
	}
}
