package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/retry"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The session's stream: opening it with a Hello, reading its results and
// pushes, and re-attaching the session through the gateways when it
// breaks. Calls wait for it in stream.

// stream is one Session stream and the calls waiting on it.
type stream struct {
	idx    int // into Client.addrs
	s      agentsilov1.Gateway_SessionClient
	cancel context.CancelFunc
	sendMu sync.Mutex

	mu    sync.Mutex
	calls map[uint64]chan *agentsilov1.Result
	dead  bool

	done chan struct{} // closed once broken has let go of the stream
}

// open opens a Session stream on gateway i and waits (bounded by ctx) for
// the Welcome that answers hello.
func (c *Client) open(ctx context.Context, i int, hello *agentsilov1.Hello) (*stream, *agentsilov1.Welcome, error) {
	sctx, cancel := context.WithCancel(c.metadata(c.ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	s, err := agentsilov1.NewGatewayClient(c.conns[i]).Session(sctx)
	if err == nil {
		err = s.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: hello}})
		if errors.Is(err, io.EOF) {
			// The gateway ended the stream already (it refused the
			// caller, say): Recv returns its status.
			err = nil
		}
	}
	var f *agentsilov1.ServerFrame
	if err == nil {
		f, err = s.Recv()
	}
	if err == nil && f.GetWelcome() == nil {
		err = errs.New(codes.Internal, "gateway %s answered Hello with %T", c.addrs[i], f.GetFrame())
	}
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, nil, ctxErr(ctx, "dial "+c.addrs[i])
		}
		return nil, nil, wrap(err, "gateway "+c.addrs[i])
	}
	return &stream{idx: i, s: s, cancel: cancel, calls: make(map[uint64]chan *agentsilov1.Result), done: make(chan struct{})}, f.GetWelcome(), nil
}

// attached makes st the session's stream and starts reading it.
func (c *Client) attached(st *stream, w *agentsilov1.Welcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		st.cancel()
		return
	}
	c.cur = st
	c.lastErr = nil
	c.address, c.token, c.principal = w.Address, w.ResumeToken, w.Principal
	if c.ready != nil {
		close(c.ready)
		c.ready = nil
	}
	c.wg.Add(1)
	go c.read(st)
	c.resubscribeLocked() // topics.go
}

// read reads st until it breaks, delivering results and pushes.
func (c *Client) read(st *stream) {
	defer c.wg.Done()
	for delivered := false; ; delivered = true {
		f, err := st.s.Recv()
		if err != nil {
			c.broken(st, err, len(st.s.Trailer().Get(protocol.DrainedTrailer)) > 0, delivered)
			return
		}
		switch f := f.Frame.(type) {
		case *agentsilov1.ServerFrame_Result:
			st.mu.Lock()
			ch := st.calls[f.Result.GetCallId()]
			delete(st.calls, f.Result.GetCallId())
			st.mu.Unlock()
			if ch != nil {
				ch <- f.Result // buffered; one result per call
			}
		case *agentsilov1.ServerFrame_Push:
			if c.opts.onMessage != nil {
				c.opts.onMessage(grain.MessageFromProto(f.Push))
				continue
			}
			m := grain.MessageFromProto(f.Push)
			select {
			case c.msgs <- m:
				continue
			default:
			}
			if !c.takes.Load() {
				// The program reads no pushes (see Messages): holding
				// this one would hold the replies behind it for ever.
				continue
			}
			select {
			case c.msgs <- m:
			case <-c.ctx.Done():
			}
		}
	}
}

// broken fails the calls waiting on st and, unless the client is closing,
// starts re-attaching the session. If the gateway ended the stream because it
// is draining (drained), the calls still waiting were never started there:
// they are sent again on the re-attached stream instead of failing.
// delivered says st delivered a frame (a result or a push) before it broke.
func (c *Client) broken(st *stream, err error, drained, delivered bool) {
	st.cancel()
	msg := "connection to gateway " + c.addrs[st.idx] + " lost"
	if s := wrap(err, "").Error(); s != "" {
		msg += ": " + s
	}
	// The gateway had the calls still waiting: they may have run.
	msg += "; the request may have run"
	st.mu.Lock()
	st.dead = true
	for id, ch := range st.calls {
		if drained {
			ch <- resend
		} else {
			ch <- &agentsilov1.Result{CallId: id, Error: &agentsilov1.Status{Code: int32(codes.Unavailable), Message: msg}}
		}
		delete(st.calls, id)
	}
	st.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(st.done) // after c.cur let go of st: its callers wait for the next stream
	if c.closed || c.cur != st {
		return
	}
	c.cur = nil
	c.ready = make(chan struct{})
	if delivered {
		c.flaps = 0
	} else {
		c.flaps++
	}
	c.wg.Add(1)
	go c.reattach(st.idx, flapDelay(c.flaps))
}

// flapDelay is the pause before re-attaching after n streams in a row broke
// before delivering anything: none after the first (it may just have been
// idle), then retry.Reattach's steps (50 ms doubling to 5 s). A gateway
// that ends every stream at once (one that cannot write a message it holds
// for the session, say) is then not asked for a new stream thousands of
// times a second.
func flapDelay(n int) time.Duration {
	if n < 2 {
		return 0
	}
	return retry.Reattach.Step(n - 1)
}

// reattach re-attaches the session, after pausing for delay, trying the
// gateways in turn from the one after last, with backoff between rounds,
// until it succeeds or the client closes.
func (c *Client) reattach(last int, delay time.Duration) {
	defer c.wg.Done()
	if delay > 0 {
		select {
		case <-c.after(delay):
		case <-c.ctx.Done():
			return
		}
	}
	b := retry.Reattach.New(nil) // waits through c.after
	for {
		var err error
		for n := 1; n <= len(c.addrs); n++ {
			i := (last + n) % len(c.addrs)
			c.mu.Lock()
			hello := &agentsilov1.Hello{Principal: c.opts.principal, ResumeAddress: c.address, ResumeToken: c.token}
			c.mu.Unlock()
			var st *stream
			var w *agentsilov1.Welcome
			st, w, err = c.openBounded(i, hello)
			if errors.Is(err, ErrPermissionDenied) {
				// The gateway refuses to resume this session: start afresh.
				st, w, err = c.openBounded(i, &agentsilov1.Hello{Principal: c.opts.principal})
			}
			if err == nil {
				c.attached(st, w)
				return
			}
			if c.ctx.Err() != nil {
				return
			}
		}
		// Every gateway failed: the callers waiting get Unavailable, and the
		// next round starts after a pause.
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		c.lastErr = err
		close(c.ready)
		c.ready = make(chan struct{})
		c.mu.Unlock()
		select {
		case <-c.after(b.Next()):
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *Client) openBounded(i int, hello *agentsilov1.Hello) (*stream, *agentsilov1.Welcome, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.timeout)
	defer cancel()
	return c.open(ctx, i, hello)
}

// stream returns the session's stream, waiting (bounded by ctx) while it is
// being re-attached: through failed rounds of re-attaching too, since a
// call not yet sent is safe to send late, so that a call made while every
// gateway is briefly down (a restart, a partition) goes out once one is
// back, within its deadline. At the deadline it fails saying why the last
// round failed.
func (c *Client) stream(ctx context.Context) (*stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return nil, errs.New(codes.Unavailable, "client is closed")
		case c.cur != nil:
			return c.cur, nil
		}
		ready := c.ready // not nil while re-attaching
		c.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
		}
		c.mu.Lock()
		if c.cur == nil && !c.closed && ctx.Err() != nil {
			if c.lastErr != nil {
				return nil, ctxErr(ctx, fmt.Sprintf("waiting for a gateway (none reachable: %v)", c.lastErr))
			}
			return nil, ctxErr(ctx, "waiting for the gateway")
		}
	}
}

// waitDone waits, bounded by ctx, until broken has let go of st, so that a
// call sent again finds the next stream instead of st.
func (st *stream) waitDone(ctx context.Context, m *agentsilov1.AgentMessage) error {
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
		return callCtxErr(ctx, m.GetTo(), false)
	}
}

func (st *stream) send(f *agentsilov1.ClientFrame) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	return st.s.Send(f)
}
