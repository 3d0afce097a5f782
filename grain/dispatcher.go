package grain

import (
	"sync"
)

// dispatcher is the protoactor Dispatcher of a runtime. protoactor's default
// starts a goroutine per mailbox run; a fresh goroutine starts on a small
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
	run chan task // buffered; the zero task means exit
}

// task is a mailbox to run, or a function (protoactor's Schedule).
type task struct {
	mb *mailbox
	fn func()
}

func (t task) do() {
	if t.mb != nil {
		t.mb.run()
	} else {
		t.fn()
	}
}

const maxParked = 64

func newDispatcher(throughput int) *dispatcher {
	return &dispatcher{throughput: throughput}
}

// Schedule implements actor.Dispatcher.
func (d *dispatcher) Schedule(fn func()) { d.schedule(task{fn: fn}) }

// scheduleRun runs m's mailbox; unlike Schedule, it needs no func value per
// mailbox.
func (d *dispatcher) scheduleRun(m *mailbox) { d.schedule(task{mb: m}) }

func (d *dispatcher) schedule(fn task) {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		w := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		w.run <- fn
		return
	}
	if d.closed {
		d.mu.Unlock()
		go fn.do() // cannot happen in a closed runtime; run it anyway
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go d.work(&worker{run: make(chan task, 1)}, fn)
}

// Throughput implements actor.Dispatcher.
func (d *dispatcher) Throughput() int { return d.throughput }

func (d *dispatcher) work(w *worker, fn task) {
	defer d.wg.Done()
	for fn.mb != nil || fn.fn != nil {
		fn.do()
		d.mu.Lock()
		if d.closed || len(d.idle) >= maxParked {
			d.mu.Unlock()
			return
		}
		d.idle = append(d.idle, w)
		d.mu.Unlock()
		fn = <-w.run
	}
}

// close makes parked workers exit and waits for all workers to finish. The
// runtime calls it last, when no mailbox schedules runs any more.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	for _, w := range d.idle {
		w.run <- task{}
	}
	d.idle = nil
	d.mu.Unlock()
	d.wg.Wait()
}
