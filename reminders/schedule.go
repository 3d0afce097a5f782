package reminders

import (
	"container/heap"
	"context"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// entry is one reminder known to the Service.
type entry struct {
	key  string
	b    *bucket // the bucket holding it
	addr grain.Address
	r    grain.Reminder
	rev  int64     // etcd mod revision of r
	next time.Time // next tick, while scheduled
	idx  int       // index in the heap; -1 when not scheduled
}

// nextAfter is the first tick of r strictly after now: Due, or Due + k*Period.
func nextAfter(r grain.Reminder, now time.Time) time.Time {
	if r.Due.After(now) {
		return r.Due
	}
	k := now.Sub(r.Due)/r.Period + 1
	return r.Due.Add(k * r.Period)
}

// lastTick is the latest tick of r at or before now; ok is false if r's first
// tick is still to come.
func lastTick(r grain.Reminder, now time.Time) (t time.Time, ok bool) {
	if r.Due.After(now) {
		return time.Time{}, false
	}
	return r.Due.Add(now.Sub(r.Due) / r.Period * r.Period), true
}

// firstTickPending reports whether r's first tick, at r.Due, is due at now
// and still its latest: a reminder registered with no delay (a Due of now,
// or just before it once stored in milliseconds), or learned of from etcd
// within a period of its first tick. Nobody has fired that tick: only the
// owner fires, and it learns of a reminder's state once (by Register or by
// the watch; a revision already known is skipped).
func firstTickPending(r grain.Reminder, now time.Time) bool {
	return !r.Due.After(now) && now.Sub(r.Due) < r.Period
}

// putLocked records r under key at etcd revision rev in bk, unless the
// Service already knows a newer state of the key, and schedules it. A tick
// between catchUpAfter and now fires once at once (see scheduleLocked), and
// so does, if this state is learned of as it is written (learned: by
// Register or the watch, not by a load), a first tick that is due already
// (see firstTickPending). It reports whether the heap's head changed.
func (s *Service) putLocked(bk *bucket, key string, addr grain.Address, r grain.Reminder, rev int64, catchUpAfter, now time.Time, learned bool) bool {
	if t, ok := bk.tombs[key]; ok && t >= rev {
		return false
	}
	e := bk.entries[key]
	if e != nil && e.rev >= rev {
		return false
	}
	if e == nil {
		e = &entry{key: key, b: bk, addr: addr, idx: -1}
		bk.entries[key] = e
		s.count++
	}
	e.r, e.rev = r, rev
	if learned && firstTickPending(r, now) {
		catchUpAfter = r.Due.Add(-time.Nanosecond)
	}
	s.scheduleLocked(e, now, catchUpAfter)
	return e.idx == 0
}

// scheduleLocked puts e in the heap at its next tick. If a tick of e fell in
// (catchUpAfter, now], nobody fired it (the silo was down, or the agent was
// owned elsewhere by a silo that failed), so e fires once at once, not once
// per missed tick.
func (s *Service) scheduleLocked(e *entry, now, catchUpAfter time.Time) {
	if t, ok := lastTick(e.r, now); ok && t.After(catchUpAfter) {
		e.next = t
	} else {
		e.next = nextAfter(e.r, now)
	}
	if e.idx >= 0 {
		heap.Fix(&s.heap, e.idx)
	} else {
		heap.Push(&s.heap, e)
	}
}

// deleteLocked forgets key of bk as of etcd revision rev. A local delete
// (Unregister) leaves a tombstone, so that an older state of the key still on
// its way (a page being loaded, a watch event) does not bring it back.
func (s *Service) deleteLocked(bk *bucket, key string, rev int64, tomb bool) {
	e := bk.entries[key]
	if e != nil && e.rev > rev {
		return
	}
	if tomb && bk.tombs[key] < rev {
		bk.tombs[key] = rev
	}
	if e == nil {
		return
	}
	if e.idx >= 0 {
		s.heap.remove(e)
	}
	delete(bk.entries, key)
	s.count--
}

// batchLimit bounds the ticks taken from the heap per lock hold.
const batchLimit = 1024

// due takes up to batchLimit due ticks off the heap, advancing each reminder
// to its next tick after now, and returns them with the wait until the next
// one (-1: none scheduled).
//
// A tick fires only if its bucket is held (by the newest view applied) and
// owned by the view in force: between a new view and its Rebalance, the
// buckets it moved away fire nowhere here (they are parked: taken off the
// heap, and scheduled again if a later view gives them back before it was
// applied).
func (s *Service) due(batch []*grain.Message) ([]*grain.Message, time.Duration) {
	v := s.view() // before the lock: Config.View may take the cluster's
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clk.Now()
	for len(s.heap) > 0 && len(batch) < batchLimit {
		e := s.heap[0]
		if e.next.After(now) {
			return batch, e.next.Sub(now)
		}
		if !s.holds(e.b) { // let go; apply takes its entries off
			s.heap.remove(e)
			continue
		}
		if e.b.version != v.Version && !v.Owns(e.b.n) {
			s.heap.remove(e) // moved away by a view not yet applied
			e.b.parked = true
			continue
		}
		if f := s.cfg.ObserveLateness; f != nil {
			f(now.Sub(e.next))
		}
		a := e.addr.String()
		// A tick is the agent's own: on behalf of its owner.
		batch = append(batch, &grain.Message{From: a, To: a, OnBehalfOf: e.addr.Owner, MessageType: e.r.MessageType, Message: e.r.Message})
		e.next = nextAfter(e.r, now)
		heap.Fix(&s.heap, 0)
	}
	if len(s.heap) == 0 {
		return batch, -1
	}
	return batch, max(0, s.heap[0].next.Sub(now))
}

// schedule is the one goroutine that fires reminders: it sleeps on a single
// timer until the heap's head is due, hands the due ticks to the workers, and
// starts over when woken by a change of the head.
func (s *Service) schedule() {
	defer s.wg.Done()
	select {
	case <-s.started:
	case <-s.stop:
		return
	}
	timer := s.cfg.clk.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		batch   []*grain.Message
		wait    time.Duration
		flushed []chan struct{}
	)
	for {
		for {
			batch, wait = s.due(batch[:0])
			for i, m := range batch {
				select {
				case s.jobs <- m:
					s.fired.Add(1)
				case <-s.stop:
					return
				}
				batch[i] = nil
			}
			if len(batch) < batchLimit {
				break
			}
		}
		for _, f := range flushed {
			close(f)
		}
		flushed = flushed[:0]
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C():
		case <-s.wake:
		case f := <-s.flushes:
			flushed = append(flushed, f)
		case <-s.stop:
			return
		}
	}
}

// flush returns once every tick due at the clock's present time has been
// handed to the workers (counted in Stats.Fired). Tests use it to check
// counts without waiting on time.
func (s *Service) flush(ctx context.Context) error {
	f := make(chan struct{})
	select {
	case s.flushes <- f:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return context.Canceled
	}
	select {
	case <-f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return context.Canceled
	}
}

// work delivers ticks, one at a time, until Close.
func (s *Service) work() {
	defer s.wg.Done()
	for {
		select {
		case m := <-s.jobs:
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.DeliverTimeout)
			err := s.deliver(ctx, m) // set before the scheduler started
			cancel()
			if err != nil && s.ctx.Err() == nil {
				s.cfg.Logger.Warn("reminders: tick not delivered", "agent", m.To, "type", m.MessageType, "err", err)
			}
		case <-s.stop:
			return
		}
	}
}

// timeHeap is a min-heap of scheduled entries by next tick.
type timeHeap []*entry

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h timeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *timeHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *timeHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

func (h *timeHeap) remove(e *entry) {
	if e.idx >= 0 {
		heap.Remove(h, e.idx)
	}
}

// keep removes from the heap, in one pass, every entry keep rejects, and
// restores the heap's order: for removing many at once (O(n), against
// O(log n) for each removal).
func (h *timeHeap) keep(keep func(*entry) bool) {
	kept := (*h)[:0]
	for _, e := range *h {
		if keep(e) {
			e.idx = len(kept)
			kept = append(kept, e)
		} else {
			e.idx = -1
		}
	}
	clear((*h)[len(kept):])
	*h = kept
	heap.Init(h)
}
