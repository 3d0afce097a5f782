package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/retry"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// peer returns the peer at addr, starting it if it is new.
func (t *Transport) peer(addr string) (*peer, error) {
	t.mu.RLock()
	p, closed := t.peers[addr], t.closed
	t.mu.RUnlock()
	if p != nil {
		return p, nil
	}
	if closed {
		return nil, errTransportClosed()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errTransportClosed()
	}
	if p = t.peers[addr]; p != nil {
		return p, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, t.dial...)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "peer address %q: %w", protocol.Clip(addr), err)
	}
	p = &peer{
		t:       t,
		addr:    addr,
		conn:    conn,
		client:  agentsilov1.NewPeerClient(conn),
		pending: make(map[uint64]*call),
		stopped: make(chan struct{}),
		idleNow: make(chan struct{}, 1),
	}
	p.queue.init(t.cfg.QueueSize)
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	if t.hookEnqueued != nil || t.hookBeforeSend != nil {
		p.w.hook = func() {
			if h := t.hookEnqueued; h != nil {
				h(addr)
			}
			if h := t.hookBeforeSend; h != nil {
				h(addr)
			}
		}
	}
	t.peers[addr] = p
	t.wg.Add(1)
	go p.run()
	return p, nil
}

// item is an envelope queued for a stream, with its approximate size and,
// for a request, its call.
type item struct {
	env  *Envelope
	size int
	call *call
}

// call is an Ask waiting for its reply.
type call struct {
	done     chan result // buffered; written once, by whoever removed the call from pending
	finished atomic.Bool // set when it was removed: a sender skips it
	// fate decides, once, between the sender and a broken stream: callQueued
	// until the sender takes it for a batch (callWritten: it may reach the
	// peer) or the stream breaks first (callUnsent: it never will).
	fate atomic.Int32
}

const (
	callQueued int32 = iota
	callWritten
	callUnsent
)

// callPool recycles the calls (and their channels) of Asks that got their
// reply; see release.
var callPool = sync.Pool{New: func() any { return &call{done: make(chan result, 1)} }}

// newCall returns a call ready to be registered.
func newCall() *call { return callPool.Get().(*call) }

// release returns c to the pool once its result was received, if nothing
// else can still hold it: a call the sender took (callWritten) is no longer
// in a queue, and it left pending before its result was sent. A call still
// queued, or failed before it was written, may yet be seen by the sender,
// so it is left to the GC.
func (c *call) release() {
	if c.fate.Load() != callWritten {
		return
	}
	c.finished.Store(false)
	c.fate.Store(callQueued)
	callPool.Put(c)
}

type result struct {
	msg *agentsilov1.AgentMessage
	err error
}

type peerState int

const (
	stateConnecting peerState = iota // asks queue until the stream is open
	stateUp
	stateDown // broken, waiting to retry: asks fail at once
	stateIdle // closed for want of traffic: asks queue, and open it again
)

// peer is the outbound side towards one peer: its queue, its sender (run)
// and the Asks waiting for replies.
type peer struct {
	t       *Transport
	addr    string
	conn    *grpc.ClientConn // nil while idle; used by run only, once started
	client  agentsilov1.PeerClient
	ctx     context.Context // cancelled by ClosePeer or Close
	cancel  context.CancelFunc
	queue   queue[item]
	w       writer // writes to the stream, when there is one
	nextID  atomic.Uint64
	asking  atomic.Int64  // Asks under way
	stopped chan struct{} // closed when run returns
	idleNow chan struct{} // test hook: check for idleness now, as if IdleTimeout had passed quietly

	mu      sync.Mutex
	state   peerState
	downErr error
	pending map[uint64]*call
	retired bool // Retire: no new calls; the stream closes when pending is empty
}

// usable returns Unavailable while the peer's stream is down.
func (p *peer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == stateDown {
		return p.downErr
	}
	return nil
}

// register adds a pending call, unless the peer is down.
func (p *peer) register(id uint64, c *call) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == stateDown {
		return notDelivered{p.downErr}
	}
	if p.retired {
		return notDelivered{errs.New(codes.Unavailable, "peer %s left the view", p.addr)}
	}
	p.pending[id] = c
	return nil
}

// retire refuses new calls and closes the stream once the calls under way
// have their results (at once if there are none): calls the peer was
// already answering when it left the view are not cut short.
func (p *peer) retire() {
	p.mu.Lock()
	p.retired = true
	idle := len(p.pending) == 0
	p.mu.Unlock()
	if idle {
		p.cancel()
	}
}

// drained closes a retired peer's stream once its last call has its result.
// Called with p.mu held, after a call left pending.
func (p *peer) drained() {
	if p.retired && len(p.pending) == 0 {
		p.cancel()
	}
}

// forget removes a pending call; false means it was completed meanwhile and
// its result is in its done channel.
func (p *peer) forget(id uint64) bool {
	p.mu.Lock()
	c := p.pending[id]
	delete(p.pending, id)
	p.drained()
	p.mu.Unlock()
	if c != nil {
		c.finished.Store(true)
	}
	return c != nil
}

// complete hands a reply to the call waiting for it, if it still waits.
func (p *peer) complete(id uint64, r result) {
	p.mu.Lock()
	c := p.pending[id]
	delete(p.pending, id)
	p.drained()
	p.mu.Unlock()
	if c != nil {
		c.finished.Store(true)
		c.done <- r
	}
}

// enqueue queues it, waiting for room as long as ctx allows. A request
// that is the only one in flight to the peer is written at once by the
// calling goroutine if it can be (see writer.direct): there is nothing to
// batch it with, so a hand-off to the sender would only add latency. With
// more in flight, requests queue for the sender, which batches them.
func (p *peer) enqueue(ctx context.Context, it item) error {
	if it.call != nil && p.asking.Load() == 1 && p.w.direct(p.t, it) {
		return nil
	}
	p.w.queued.Add(1)
	if !p.queue.tryPut(it) {
		done := ctx.Done()
		if done == nil {
			p.w.queued.Add(-1)
			return errs.New(codes.ResourceExhausted, "queue to peer %s is full (%d envelopes): not sent, so it did not run", p.addr, p.t.cfg.QueueSize)
		}
		switch p.queue.put(it, done, p.ctx.Done()) {
		case 1:
			p.w.queued.Add(-1)
			return ctxErr(ctx, fmt.Sprintf("queue to peer %s is full (%d envelopes): not sent, so it did not run", p.addr, p.t.cfg.QueueSize))
		case 2:
			p.w.queued.Add(-1)
			return notSent(errTransportClosed())
		}
	}
	if h := p.t.hookEnqueued; h != nil {
		h(p.addr)
	}
	return nil
}

func (p *peer) setState(s peerState, err error) {
	p.mu.Lock()
	p.state, p.downErr = s, err
	var failed map[uint64]*call
	if s == stateDown && len(p.pending) > 0 {
		failed, p.pending = p.pending, make(map[uint64]*call)
	}
	if s == stateDown {
		p.drained() // a retired peer is not dialled again
	}
	p.mu.Unlock()
	for _, c := range failed {
		c.finished.Store(true)
		if c.fate.CompareAndSwap(callQueued, callUnsent) {
			c.done <- result{err: notDelivered{err}}
		} else {
			// The request may have run: the stream's error is kept as
			// words only, so that nothing it wraps (a not-delivered
			// error) makes this one look as if it had not run.
			c.done <- result{err: errs.New(errs.Code(err), "%s; the request may have run", err.Error())}
		}
	}
	if h := p.t.cfg.OnPeerState; h != nil && s != stateConnecting {
		h(p.addr, s == stateUp)
	}
}

// run keeps a stream open to the peer until ClosePeer or Close, and sends
// what is queued on it. A stream that carried nothing for IdleTimeout is
// closed with its connection (see idle), and opened again for the next
// envelope.
func (p *peer) run() {
	defer p.t.wg.Done()
	defer close(p.stopped)
	defer func() {
		if p.conn != nil {
			p.conn.Close()
		}
	}()
	b := retry.New(minBackoff, p.t.cfg.MaxBackoff, nil)
	logged := false
	for {
		var up bool
		var err error
		if p.conn == nil {
			err = p.dial()
		}
		if err == nil {
			up, err = p.connectAndServe()
		}
		if p.ctx.Err() != nil {
			p.setState(stateDown, errTransportClosed())
			p.drain(errTransportClosed())
			return
		}
		if errors.Is(err, errIdle) {
			p.conn.Close()
			p.conn, p.client = nil, nil
			p.queue.release()
			b.Reset()
			logged = false
			if !p.waitWork() {
				p.setState(stateDown, errTransportClosed())
				p.drain(errTransportClosed())
				return
			}
			p.setState(stateConnecting, nil)
			continue
		}
		if up {
			b.Reset()
		}
		if up || !logged {
			p.t.logger.Warn("peer stream down", "peer", p.addr, "err", err)
			logged = !up
		}
		p.setState(stateDown, errs.New(codes.Unavailable, "peer %s: stream down: %s", p.addr, errMessage(err)))
		// Wait before retrying, failing what is queued meanwhile.
		p.dropQueued()
		timer := time.NewTimer(b.Next())
	backoff:
		for {
			select {
			case <-timer.C:
				break backoff
			case <-p.queue.ready:
				p.dropQueued()
			case <-p.ctx.Done():
				timer.Stop()
				p.setState(stateDown, errTransportClosed())
				p.drain(errTransportClosed())
				return
			}
		}
		p.setState(stateConnecting, nil)
	}
}

// dial makes the peer's connection again after it was closed for
// idleness (it connects on the stream's first use).
func (p *peer) dial() error {
	conn, err := grpc.NewClient("passthrough:///"+p.addr, p.t.dial...)
	if err != nil {
		return err
	}
	p.conn, p.client = conn, agentsilov1.NewPeerClient(conn)
	return nil
}

// errIdle ends a stream closed for idleness.
var errIdle = errors.New("idle")

// idle marks the peer idle and stops direct writes to its stream, if
// nothing was written to it since the writer's count was mark (any: quiet
// is true), and nothing is queued for it, held by its sender or waiting
// for a reply: its stream may then be closed. An Ask or Send from then on
// queues, and its sender opens the stream again. It returns the writer's
// count, the mark of the next check.
func (p *peer) idle(mark uint64, quiet bool) (bool, uint64) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if !quiet && p.w.writes != mark {
		return false, p.w.writes
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 || p.w.queued.Load() != 0 || p.retired || p.state != stateUp {
		return false, p.w.writes
	}
	p.state = stateIdle
	p.w.send, p.w.broken = nil, nil
	return true, p.w.writes
}

// waitWork waits, the stream closed for idleness, for an envelope to
// send; false if the peer was closed first.
func (p *peer) waitWork() bool {
	for p.queue.len() == 0 {
		select {
		case <-p.queue.ready:
		case <-p.ctx.Done():
			return false
		}
	}
	return true
}

// drop discards a queued envelope whose stream is down; its call, if any,
// has already failed with the stream.
func (p *peer) drop(it item) {
	if it.call == nil && !it.env.Cancel {
		p.t.logger.Debug("one-way message to a peer whose stream is down dropped", "peer", p.addr, "to", it.env.GetMessage().GetTo())
	}
}

// dropQueued drops what is queued while the stream is down.
func (p *peer) dropQueued() {
	for {
		it, ok := p.queue.take()
		if !ok {
			return
		}
		p.w.queued.Add(-1)
		p.drop(it)
	}
}

// drain drops everything queued, failing the calls with err.
func (p *peer) drain(err error) {
	for {
		it, ok := p.queue.take()
		if !ok {
			return
		}
		p.w.queued.Add(-1)
		if it.call != nil && !it.call.finished.Load() {
			p.complete(it.env.CallId, result{err: notSent(err)})
		}
		p.drop(it)
	}
}

// connectAndServe opens a stream, exchanges hellos and sends until the stream
// breaks. up reports whether the stream was open.
func (p *peer) connectAndServe() (up bool, err error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	timer := time.AfterFunc(p.t.cfg.ConnectTimeout, cancel)
	stream, err := p.client.Stream(ctx)
	if err == nil {
		err = stream.Send(p.t.hello())
	}
	var first *agentsilov1.PeerBatch
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: Recv has the stream's status
		first, err = stream.Recv()
	}
	if !timer.Stop() && err == nil {
		err = errs.New(codes.DeadlineExceeded, "connect timed out")
	}
	if err == nil && first.GetHello() == nil {
		err = errs.New(codes.Internal, "peer sent no hello")
	}
	if err == nil {
		err = p.t.checkPeer(stream.Context(), first.GetHello().GetSilo())
	}
	if err != nil {
		return false, err
	}
	p.t.logger.Debug("peer stream up", "peer", p.addr, "remote", first.Hello.Silo)
	p.setState(stateUp, nil)
	p.deliver(first)
	p.w.open(stream.Send, cancel)

	rdone := make(chan struct{})
	var rerr error
	p.t.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		defer close(rdone)
		// One batch, read into again and again: deliver keeps none of it
		// but the envelopes.
		b := new(agentsilov1.PeerBatch)
		for {
			if err := stream.RecvMsg(b); err != nil {
				rerr = err
				return
			}
			p.deliver(b)
		}
	}()
	err = p.write(ctx, stream, rdone)
	if errors.Is(err, errIdle) {
		// Half-close: the peer hands on what it was sent, then ends the
		// stream, which the reader sees. Bounded, in case it does not.
		_ = stream.CloseSend()
		t := time.NewTimer(p.t.cfg.ConnectTimeout)
		select {
		case <-rdone:
		case <-t.C:
		}
		t.Stop()
	}
	cancel()
	p.w.shut()
	<-rdone
	if errors.Is(err, errIdle) {
		p.t.logger.Debug("peer stream closed: idle", "peer", p.addr)
		return true, err
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = rerr
	}
	return true, err
}

// deliver hands the responses in b to their calls.
func (p *peer) deliver(b *agentsilov1.PeerBatch) {
	for _, e := range b.GetEnvelopes() {
		if e.Kind != agentsilov1.Kind_KIND_RESPONSE {
			p.t.logger.Warn("peer sent a non-response on its reply stream", "peer", p.addr, "kind", e.Kind)
			continue
		}
		if st := e.GetError(); st != nil {
			code := codes.Code(st.Code)
			if code == codes.OK {
				code = codes.Internal
			}
			err := errs.New(code, "%s", st.Message)
			if e.NotRun {
				// Refused before any agent ran it: it may be sent again.
				err = notDelivered{err}
			}
			p.complete(e.CallId, result{err: err})
			continue
		}
		msg := e.Message
		if msg == nil {
			msg = &agentsilov1.AgentMessage{}
		}
		p.complete(e.CallId, result{msg: msg})
	}
}

// write sends what is queued, in batches, until the stream breaks (rdone) or
// ctx ends, or until the stream is found idle (errIdle): nothing sent to
// the peer for a whole IdleTimeout, nothing queued and no reply awaited.
func (p *peer) write(ctx context.Context, stream agentsilov1.Peer_StreamClient, rdone <-chan struct{}) error {
	w := batcher{t: p.t, batch: &agentsilov1.PeerBatch{}}
	var idle <-chan time.Time
	var timer *time.Timer
	d := p.t.cfg.IdleTimeout
	if d > 0 {
		timer = time.NewTimer(d)
		defer timer.Stop()
		idle = timer.C
	}
	p.w.mu.Lock()
	mark := p.w.writes
	p.w.mu.Unlock()
	for {
		it, ok := p.queue.take()
		if !ok {
			select {
			case <-p.queue.ready:
			case <-rdone:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-idle:
				var quiet bool
				if quiet, mark = p.idle(mark, false); quiet {
					return errIdle
				}
				timer.Reset(d)
			case <-p.idleNow:
				if quiet, _ := p.idle(0, true); quiet {
					return errIdle
				}
			}
			continue
		}
		p.w.mu.Lock()
		if h := p.t.hookBeforeSend; h != nil {
			h(p.addr)
		}
		w.fill(it, &p.queue)
		err := w.flush(stream.Send)
		p.w.queued.Add(-int64(w.taken))
		p.w.writes++
		p.w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
