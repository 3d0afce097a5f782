package gateway

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A session is a client's addressable presence on the gateway,
// `Session:<principal>:<id>`. It outlives the streams that attach to it: while
// no stream is attached, messages sent to it wait in its queue (bounded by
// SessionBacklog) and are delivered in order when the client re-attaches with
// the resume token, within SessionBacklogAge.
//
// The queue holds the frames the session's stream has yet to write, in order:
// pushed messages and the results of calls. Results belong to the attachment
// whose call they answer and are dropped if it is gone; pushes stay until
// written. One writer goroutine per attachment drains it.
type session struct {
	addr      string
	principal string
	caller    *acl.Caller // the client grain's caller: principal and groups
	token     string

	mu         sync.Mutex
	queue      []outFrame
	pushes     int         // pushes in queue
	att        *attachment // nil while detached
	detachedAt time.Time
}

// outFrame is a frame waiting in a session's queue: a push (att nil) or the
// result of a call made on att.
type outFrame struct {
	frame *agentsilov1.ServerFrame
	att   *attachment
}

// An attachment is one Session stream attached to a session.
type attachment struct {
	stream     agentsilov1.Gateway_SessionServer
	wake       chan struct{} // cap 1: the queue has something for the writer
	kicked     chan struct{} // closed when another stream takes the session over
	flush      chan struct{} // closed when the writer should drain and return
	writerDone chan struct{}

	mu    sync.Mutex
	calls map[uint64]context.CancelFunc
}

func newAttachment(stream agentsilov1.Gateway_SessionServer) *attachment {
	return &attachment{
		stream:     stream,
		wake:       make(chan struct{}, 1),
		kicked:     make(chan struct{}),
		flush:      make(chan struct{}),
		writerDone: make(chan struct{}),
		calls:      make(map[uint64]context.CancelFunc),
	}
}

func (a *attachment) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// enqueueLocked appends f and wakes the writer. s.mu is held.
func (s *session) enqueueLocked(f outFrame) {
	s.queue = append(s.queue, f)
	if f.att == nil {
		s.pushes++
	}
	if s.att != nil {
		s.att.signal()
	}
}

// result queues the result of a call made on att, unless att is no longer
// attached.
func (s *session) result(att *attachment, r *agentsilov1.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att == att {
		s.enqueueLocked(outFrame{frame: &agentsilov1.ServerFrame{Frame: &agentsilov1.ServerFrame_Result{Result: r}}, att: att})
	}
}

// next pops the next frame for att to write. Results of other attachments
// are dropped on the way. It returns false if there is nothing to write or
// att is no longer attached.
func (s *session) next(att *attachment) (outFrame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.att == att && len(s.queue) > 0 {
		f := s.queue[0]
		s.queue[0] = outFrame{}
		s.queue = s.queue[1:]
		switch f.att {
		case nil:
			s.pushes--
			return f, true
		case att:
			return f, true
		}
	}
	return outFrame{}, false
}

// unread puts back a push that could not be written, at the head of the queue.
func (s *session) unread(f outFrame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append([]outFrame{f}, s.queue...)
	s.pushes++
}

// Session implements agentsilov1.GatewayServer: a client's long-lived stream.
func (g *Gateway) Session(stream agentsilov1.Gateway_SessionServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return errs.New(codes.InvalidArgument, "the first frame of a session must be a Hello")
	}
	if err := g.checkDraining(); err != nil {
		return err
	}
	c, err := callerFor(acl.CallerFrom(ctx), hello.GetPrincipal())
	if err != nil {
		return err
	}
	s, resumed, err := g.sessions.open(c, hello)
	if err != nil {
		return err
	}
	att := newAttachment(stream)
	if err := g.attach(ctx, s, att); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var calls sync.WaitGroup
	defer func() {
		cancel()
		calls.Wait()
		<-att.writerDone
		g.detach(s, att)
	}()
	err = stream.Send(&agentsilov1.ServerFrame{Frame: &agentsilov1.ServerFrame_Welcome{Welcome: &agentsilov1.Welcome{
		Address:     s.addr,
		ResumeToken: s.token,
		Resumed:     resumed,
		Principal:   s.principal,
		Silo:        g.cfg.Silo,
	}}})
	if err != nil {
		close(att.writerDone)
		return err
	}
	go g.write(ctx, s, att)

	// Recv cannot be interrupted but by returning, so a reader goroutine
	// feeds frames in, and the handler can end the stream on GracefulStop.
	frames := make(chan *agentsilov1.ClientFrame)
	readErr := make(chan error, 1)
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		for {
			f, err := stream.Recv()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	// finish lets the calls in flight end, writes what is queued, and ends
	// the stream with err.
	finish := func(err error) error {
		calls.Wait()
		close(att.flush)
		<-att.writerDone
		return err
	}
	for {
		select {
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				// The client sends no more.
				return finish(nil)
			}
			return err
		case <-ctx.Done():
			// The client is gone (the reader may have stopped on this too).
			return ctx.Err()
		case <-g.drain:
			// Every call started on this stream has its result written
			// before the stream ends; the trailer tells the client that the
			// calls it is still waiting for were never started, so it may
			// send them again through another gateway.
			stream.SetTrailer(metadata.Pairs(protocol.DrainedTrailer, "1"))
			return finish(g.checkDraining())
		case f := <-frames:
			switch f := f.Frame.(type) {
			case *agentsilov1.ClientFrame_Call:
				g.startCall(ctx, s, att, f.Call, &calls)
			case *agentsilov1.ClientFrame_Cancel:
				att.mu.Lock()
				if cancel := att.calls[f.Cancel.GetCallId()]; cancel != nil {
					cancel()
				}
				att.mu.Unlock()
			default:
				return errs.New(codes.InvalidArgument, "unexpected frame %T after Hello", f)
			}
		}
	}
}

// attach makes att the session's stream. A stream already attached (its
// client gone without the server noticing yet, or re-attaching through
// another route) is taken over: its writer stops first, so that the order of
// the pushes is kept.
func (g *Gateway) attach(ctx context.Context, s *session, att *attachment) error {
	s.mu.Lock()
	old := s.att
	s.att = att
	s.mu.Unlock()
	if old == nil {
		return nil
	}
	close(old.kicked)
	select {
	case <-old.writerDone:
		return nil
	case <-ctx.Done():
		g.detach(s, att)
		return ctx.Err()
	}
}

// detach ends att's attachment to s, if it is still attached: from now on
// the session keeps a backlog and ages.
func (g *Gateway) detach(s *session, att *attachment) {
	s.mu.Lock()
	detached := s.att == att
	if detached {
		s.att = nil
		s.detachedAt = time.Now()
		kept := s.queue[:0]
		for _, f := range s.queue {
			if f.att == nil {
				kept = append(kept, f)
			}
		}
		clear(s.queue[len(kept):])
		s.queue = kept
	}
	s.mu.Unlock()
	if detached && g.testHookDetached != nil {
		g.testHookDetached(s.addr)
	}
}

// write is att's writer: it writes the session's queue to the stream until
// ctx ends, att is taken over, or att.flush finds the queue empty.
func (g *Gateway) write(ctx context.Context, s *session, att *attachment) {
	defer close(att.writerDone)
	for {
		f, ok := s.next(att)
		if !ok {
			select {
			case <-att.wake:
				continue
			case <-att.flush:
				return
			case <-att.kicked:
				return
			case <-ctx.Done():
				return
			}
		}
		if err := att.stream.Send(f.frame); err != nil {
			if f.att == nil {
				s.unread(f)
			}
			return
		}
	}
}

// startCall runs one Call of a session on its own goroutine.
func (g *Gateway) startCall(ctx context.Context, s *session, att *attachment, c *agentsilov1.Call, calls *sync.WaitGroup) {
	id := c.GetCallId()
	att.mu.Lock()
	if _, dup := att.calls[id]; dup {
		att.mu.Unlock()
		s.result(att, errResult(id, errs.New(codes.InvalidArgument, "call %d is already in flight", id)))
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	att.calls[id] = cancel
	att.mu.Unlock()
	calls.Add(1)
	go func() {
		defer calls.Done()
		r := g.call(ctx, s, c)
		att.mu.Lock()
		delete(att.calls, id)
		att.mu.Unlock()
		cancel()
		s.result(att, r)
	}()
}

// call runs the message of c for session s, its client grain: checked
// against the ACL, and sent from the session's address.
func (g *Gateway) call(ctx context.Context, s *session, c *agentsilov1.Call) *agentsilov1.Result {
	m := c.GetMessage()
	if err := g.checkMessage(m); err != nil {
		return errResult(c.GetCallId(), err)
	}
	if err := g.authorizeMessage(s.caller, m); err != nil {
		return errResult(c.GetCallId(), err)
	}
	stamp(m, s.addr)
	r, err := g.dispatch(ctx, m, time.Duration(c.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return errResult(c.GetCallId(), err)
	}
	return &agentsilov1.Result{CallId: c.GetCallId(), Message: r}
}

func errResult(id uint64, err error) *agentsilov1.Result {
	return &agentsilov1.Result{CallId: id, Error: &agentsilov1.Status{Code: int32(errs.Code(err)), Message: err.Error()}}
}
