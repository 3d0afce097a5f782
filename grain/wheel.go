package grain

import (
	"container/heap"
	"sync"
	"time"
)

// idleWheel is the idle collection's schedule: each live activation sits in
// the bucket of the moment it would become idle (its last activity plus its
// idle timeout, rounded down to a sixteenth of that timeout, within 1 ms and
// 1 s), so that a sweep visits only the
// activations due, not every activation. A visited activation that was used
// meanwhile goes back in at its new moment; one that is idle is asked to
// deactivate and checked again a sweep later (it may decline: see
// activation.receive). An activation is thus visited about once per idle
// timeout while it lives, whatever the number of activations.
//
// Buckets are intrusive doubly-linked lists through the activations
// (wnext, wprev), so that adding and removing allocate nothing and an ended
// activation leaves at once. A bucket's key (its moment, Unix ns) is in the
// map and, once, in a min-heap from the bucket's first add until a sweep
// takes it, even if it empties meanwhile: there are at most about 16 + the
// idle timeout in seconds keys per idle timeout in use.
//
// Lock order: idleWheel.mu is taken alone (never with a directory shard or
// a mailbox lock held, and it takes neither).
type idleWheel struct {
	mu       sync.Mutex
	buckets  map[int64]*activation // key -> first activation of the bucket (nil: empty)
	ticks    tickHeap              // the keys of buckets, each once
	shortest int64                 // shortest idle timeout added (ns)
}

func (w *idleWheel) init(shortest int64) {
	w.buckets = make(map[int64]*activation)
	w.shortest = shortest
}

// bucketOf returns the key of the bucket for the moment at (Unix ns) of an
// activation whose idle timeout is idle: at rounded down; never 0, which
// means "in no bucket".
func bucketOf(at, idle int64) int64 {
	res := min(max(idle/16, int64(time.Millisecond)), int64(time.Second))
	return max(at-at%res, 1)
}

// add puts a in the bucket of at, unless a has ended (see remove) or is in
// the wheel already.
func (w *idleWheel) add(a *activation, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.ended.Load() || a.wtick != 0 {
		return
	}
	w.shortest = min(w.shortest, a.idle)
	t := bucketOf(at, a.idle)
	head, ok := w.buckets[t]
	if !ok {
		heap.Push(&w.ticks, t)
	}
	a.wtick, a.wprev, a.wnext = t, nil, head
	if head != nil {
		head.wprev = a
	}
	w.buckets[t] = a
}

// remove takes a out of the wheel. The runtime sets a.ended before calling
// it, so that a sweep holding a (see due) does not put it back.
func (w *idleWheel) remove(a *activation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.wtick == 0 {
		return
	}
	if a.wprev != nil {
		a.wprev.wnext = a.wnext
	} else {
		w.buckets[a.wtick] = a.wnext // nil if a was alone: the key stays (see above)
	}
	if a.wnext != nil {
		a.wnext.wprev = a.wprev
	}
	a.wtick, a.wprev, a.wnext = 0, nil, nil
}

// due takes out of the wheel every activation whose bucket's key is at or
// before now (Unix ns), appends them to buf and returns it. The caller puts
// back (add) those that stay.
func (w *idleWheel) due(now int64, buf []*activation) []*activation {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.ticks) > 0 && w.ticks[0] <= now {
		t := heap.Pop(&w.ticks).(int64)
		a := w.buckets[t]
		delete(w.buckets, t)
		for a != nil {
			next := a.wnext
			a.wtick, a.wprev, a.wnext = 0, nil, nil
			buf = append(buf, a)
			a = next
		}
	}
	return buf
}

// shortestIdle returns the shortest idle timeout of the activations added.
func (w *idleWheel) shortestIdle() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shortest
}

// tickHeap is a min-heap of bucket keys (container/heap).
type tickHeap []int64

func (h tickHeap) Len() int           { return len(h) }
func (h tickHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h tickHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tickHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *tickHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
