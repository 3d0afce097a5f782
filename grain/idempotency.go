package grain

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
)

// Idempotency keys of Send, Event and Ask (Message.IdempotencyKey).
//
// The runtime of the silo that hosts the receiver remembers each (receiver,
// key) it queued, for Config.IdempotencyWindow and up to
// Config.IdempotencyKeys of them (the oldest forgotten first). Within that,
// a message with a key already seen is not handed to the receiver again: a
// one-way message or event is dropped (its Send succeeds), and a request
// gets the first one's reply (or error), waiting for it if the first is
// still in its turn. Transient failures of the first (Unavailable,
// DeadlineExceeded, Canceled, ResourceExhausted: it may not have run) are
// not remembered, so that a retry runs. The memory is the silo's: a
// receiver that moves to another silo, or a silo that restarts, starts
// afresh. (Publishes remember their keys durably: see package topics.)

// idemCache is a runtime's memory of idempotency keys.
type idemCache struct {
	window time.Duration
	max    int

	mu    sync.Mutex
	m     map[string]*idemEntry
	order []*idemEntry // by time of first sight; head is the oldest kept
	head  int
}

// idemEntry is one key seen: its first message's result, once known.
type idemEntry struct {
	c    *idemCache
	key  string
	at   int64         // Unix ns of first sight
	done chan struct{} // closed when r is set
	r    result
}

func (c *idemCache) init(window time.Duration, max int) {
	c.window, c.max, c.m = window, max, make(map[string]*idemEntry)
}

// begin records key, seen at now, and returns its entry; dup is true if it
// was seen within the window already.
func (c *idemCache) begin(key string, now int64) (e *idemEntry, dup bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.head < len(c.order) {
		old := c.order[c.head]
		if len(c.m) < c.max && now-old.at < int64(c.window) {
			break
		}
		if c.m[old.key] == old {
			delete(c.m, old.key)
		}
		c.order[c.head] = nil
		c.head++
	}
	if c.head > len(c.order)/2 && c.head > 64 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
	if e := c.m[key]; e != nil {
		return e, true
	}
	e = &idemEntry{c: c, key: key, at: now, done: make(chan struct{})}
	c.m[key] = e
	c.order = append(c.order, e)
	return e, false
}

// finish records the first message's result and wakes the duplicates
// waiting for it; a transient failure is forgotten, so that a retry runs.
func (e *idemEntry) finish(r result) {
	if r.msg != nil {
		r.msg = proto.Clone(r.msg).(*Message)
	}
	e.r = r
	switch errs.Code(r.err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		e.c.mu.Lock()
		if e.c.m[e.key] == e {
			delete(e.c.m, e.key)
		}
		e.c.mu.Unlock()
	}
	close(e.done)
}

// idemKey is the cache key of msg: its receiver and key.
func idemKey(msg *Message) string { return msg.To + "\x00" + msg.IdempotencyKey }

// answerDuplicate completes env, a duplicate of e's message: at once if e's
// result is known, else when it is (or when env's caller gives up).
func answerDuplicate(e *idemEntry, env *envelope) {
	if !env.isRequest() {
		return
	}
	reply := func() {
		r := e.r
		if r.msg != nil {
			m := proto.Clone(r.msg).(*Message)
			m.CorrelationId = env.msg.Id
			r.msg = m
		}
		env.complete(r)
	}
	select {
	case <-e.done:
		reply()
		return
	default:
	}
	var gaveUp <-chan struct{}
	if env.expired != nil {
		gaveUp = env.expired
	} else if env.ctx != nil {
		gaveUp = env.ctx.Done()
	}
	go func() {
		select {
		case <-e.done:
			reply()
		case <-gaveUp:
			env.complete(result{err: errs.New(codes.DeadlineExceeded, "ask %s: deadline exceeded waiting for the first request with its idempotency key", env.msg.To)})
		}
	}()
}
