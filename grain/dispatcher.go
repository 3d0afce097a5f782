package grain

import (
	"sync"
	"sync/atomic"
)

// dispatcher is the protoactor Dispatcher of a runtime. protoactor's default
// starts a goroutine per mailbox run; a fresh goroutine starts on a small
// stack, and a handler that calls deep (gRPC, protobuf, agent code) makes the
// runtime copy that stack to grow it, on every message to an idle agent. Here
// a finished run parks its goroutine, with its grown stack, for the next
// mailbox to use; a run takes a parked goroutine or, when none is parked
// (turns may block in Ask for long), starts a new one, so a turn never waits
// for a free worker. At most maxParked goroutines stay parked; the rest exit.
type dispatcher struct {
	throughput int
	work       chan func() // unbuffered: a send succeeds only if a worker is parked
	quit       chan struct{}
	parked     atomic.Int32
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

const maxParked = 64

func newDispatcher(throughput int) *dispatcher {
	return &dispatcher{throughput: throughput, work: make(chan func()), quit: make(chan struct{})}
}

// Schedule implements actor.Dispatcher.
func (d *dispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		d.wg.Add(1)
		go d.worker(fn)
	}
}

// Throughput implements actor.Dispatcher.
func (d *dispatcher) Throughput() int { return d.throughput }

func (d *dispatcher) worker(fn func()) {
	defer d.wg.Done()
	for {
		fn()
		if d.parked.Add(1) > maxParked {
			d.parked.Add(-1)
			return
		}
		select {
		case fn = <-d.work:
			d.parked.Add(-1)
		case <-d.quit:
			d.parked.Add(-1)
			return
		}
	}
}

// close makes parked workers exit and waits for all workers to finish.
func (d *dispatcher) close() {
	d.closeOnce.Do(func() { close(d.quit) })
	d.wg.Wait()
}
