package grain

import (
	"sync"
)

// dispatcher runs the mailboxes of a runtime. A goroutine per mailbox run
// (protoactor-go's default dispatcher) would start on a small
// stack, and a handler that calls deep (gRPC, protobuf, agent code) makes the
// runtime copy that stack to grow it, on every message to an idle agent. Here
// a finished run parks its goroutine, with its grown stack, for the next
// mailbox to use; a run takes a parked goroutine or, when none is parked
// (turns may block in Ask for long), starts a new one, so a turn never waits
// for a free worker. At most maxParked goroutines stay parked; the rest exit.
//
// Each parked worker waits on a channel of its own, taken from a stack under
// a mutex held for a push or a pop: with many busy agents, one shared channel
// was the hottest lock of a local Ask.
type dispatcher struct {
	throughput int

	mu     sync.Mutex
	idle   []*worker // parked workers, most recently parked last
	closed bool
	wg     sync.WaitGroup
}

type worker struct {
	run chan *mailbox // buffered; nil means exit
}

const maxParked = 64

// newDispatcher makes a dispatcher whose runs yield the processor after
// throughput messages.
func newDispatcher(throughput int) *dispatcher {
	return &dispatcher{throughput: throughput}
}

// scheduleRun runs m's mailbox (mailbox.run) on a worker.
func (d *dispatcher) scheduleRun(m *mailbox) {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		w := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		w.run <- m
		return
	}
	if d.closed {
		d.mu.Unlock()
		go m.run() // cannot happen in a closed runtime; run it anyway
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go d.work(&worker{run: make(chan *mailbox, 1)}, m)
}

func (d *dispatcher) work(w *worker, m *mailbox) {
	defer d.wg.Done()
	for m != nil {
		m.run()
		d.mu.Lock()
		if d.closed || len(d.idle) >= maxParked {
			d.mu.Unlock()
			return
		}
		d.idle = append(d.idle, w)
		d.mu.Unlock()
		m = <-w.run
	}
}

// close makes parked workers exit and waits for all workers to finish. The
// runtime calls it last, when no mailbox schedules runs any more.
func (d *dispatcher) close() {
	d.release()
	d.wg.Wait()
}

// release makes parked workers exit, and workers that finish a run exit
// instead of parking, without waiting for those still running: for a
// runtime that abandons activations still live when its Close times out.
func (d *dispatcher) release() {
	d.mu.Lock()
	d.closed = true
	for _, w := range d.idle {
		w.run <- nil
	}
	d.idle = nil
	d.mu.Unlock()
}
