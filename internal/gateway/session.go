package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
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
	// caller is the client grain's caller: principal, groups, scopes;
	// the latest stream's (a stream that resumes the session brings its
	// own, such as a refreshed token's).
	caller atomic.Pointer[acl.Caller]
	token  string

	mu         sync.Mutex
	home       string // the fallback holder it is registered with (SessionHome)
	adopted    bool   // false while an adoption from its fallback holder is unfinished
	queue      []outFrame
	pushes     int         // pushes in queue
	pushBytes  int         // their encoded size
	att        *attachment // nil while detached
	detachedAt time.Time
	// opening counts the streams that found or made the session and have
	// not attached to it yet: while it is not zero the session is neither
	// replaced to make room for another nor expired, as if attached.
	opening int
}

// outFrame is a frame waiting in a session's queue: a push (att nil) or the
// result of a call made on att.
type outFrame struct {
	frame *agentsilov1.ServerFrame
	att   *attachment
	size  int // the encoded size of its message or result
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

	// The stream's budget (see limits.go), guarded by the session's mu:
	// calls in flight plus results queued (pending, of pendingBytes), the
	// results queued alone, and when the writer last took a frame.
	pending      int
	pendingBytes int
	results      int
	lastTaken    time.Time
	room         chan struct{} // cap 1: pending went down
}

func newAttachment(stream agentsilov1.Gateway_SessionServer) *attachment {
	return &attachment{
		stream:     stream,
		wake:       make(chan struct{}, 1),
		kicked:     make(chan struct{}),
		flush:      make(chan struct{}),
		writerDone: make(chan struct{}),
		calls:      make(map[uint64]context.CancelFunc),
		lastTaken:  time.Now(),
		room:       make(chan struct{}, 1),
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
		s.pushBytes += f.size
	}
	if s.att != nil {
		s.att.signal()
	}
}

// begin counts a call of size bytes in flight on att.
func (s *session) begin(att *attachment, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	att.pending++
	att.pendingBytes += size
}

// result queues the result of a call made on att, unless att is no longer
// attached, and stops counting the call's message of size bytes (0 for a
// call never counted by begin): the result counts until it is written.
func (s *session) result(att *attachment, size int, r *agentsilov1.Result) {
	f := &agentsilov1.ServerFrame{Frame: &agentsilov1.ServerFrame_Result{Result: r}}
	n := proto.Size(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	if size > 0 {
		att.pending--
		att.pendingBytes -= size
		att.freed()
	}
	if s.att == att {
		att.pending++
		att.pendingBytes += n
		att.results++
		s.enqueueLocked(outFrame{frame: f, att: att, size: n})
	}
}

// freed wakes the stream's reader if it waits for room. The session's mu is
// held.
func (a *attachment) freed() {
	select {
	case a.room <- struct{}{}:
	default:
	}
}

// hasRoom reports whether att may start another call: it is under both
// bounds (so the bytes may exceed the bound by one call).
func (s *session) hasRoom(att *attachment, l *Limits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return att.pending < l.SessionPending && att.pendingBytes < l.SessionPendingBytes
}

// stalled reports whether att has results waiting while its writer has
// taken no frame for d: its client does not read.
func (s *session) stalled(att *attachment, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return att.results > 0 && time.Since(att.lastTaken) >= d
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
			s.pushBytes -= f.size
			att.lastTaken = time.Now()
			return f, true
		case att:
			att.pending--
			att.pendingBytes -= f.size
			att.results--
			att.lastTaken = time.Now()
			att.freed()
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
	s.pushBytes += f.size
}

// recvHello reads the first frame of a session stream, which must come
// within Limits.HelloTimeout. On a timeout its reader goroutine is left to
// end with the stream.
func (g *Gateway) recvHello(ctx context.Context, stream agentsilov1.Gateway_SessionServer) (*agentsilov1.ClientFrame, error) {
	type recv struct {
		f   *agentsilov1.ClientFrame
		err error
	}
	ch := make(chan recv, 1)
	if !g.spawn(func() {
		f, err := stream.Recv()
		ch <- recv{f, err}
	}) {
		return nil, errs.New(codes.Unavailable, "gateway %s is stopping", g.cfg.Silo)
	}
	t := time.NewTimer(g.cfg.Limits.HelloTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.f, r.err
	case <-t.C:
		return nil, errs.New(codes.DeadlineExceeded, "no Hello within %v of opening the session stream", g.cfg.Limits.HelloTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
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
	s.opening--
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
			// A push goes back for the next stream, unless it is what
			// failed: a frame that does not encode (checked when queued, so
			// this is a defence) would fail every later stream too.
			if f.att == nil && !frameFault(err) {
				s.unread(f)
			} else if f.att == nil {
				g.logger.Error("push dropped: it cannot be written", "session", s.addr, "err", err)
			}
			return
		}
	}
}

// startCall runs one Call of a session on its own goroutine. The call
// counts against the session stream's budget until its result is written,
// and against its principal's calls until it returns.
func (g *Gateway) startCall(ctx context.Context, s *session, att *attachment, c *agentsilov1.Call, calls *sync.WaitGroup) {
	id := c.GetCallId()
	att.mu.Lock()
	if _, dup := att.calls[id]; dup {
		att.mu.Unlock()
		s.result(att, 0, errResult(id, errs.New(codes.InvalidArgument, "call %d is already in flight", id)))
		return
	}
	done, err := g.principals.call(s.principal)
	if err != nil {
		att.mu.Unlock()
		s.result(att, 0, errResult(id, err))
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	att.calls[id] = cancel
	att.mu.Unlock()
	size := max(proto.Size(c), 1)
	s.begin(att, size)
	calls.Add(1)
	go func() {
		defer calls.Done()
		r := g.call(ctx, s, c)
		done()
		att.mu.Lock()
		delete(att.calls, id)
		att.mu.Unlock()
		cancel()
		s.result(att, size, r)
	}()
}

// call runs the message of c for session s, its client grain: checked
// against the ACL, and sent from the session's address.
func (g *Gateway) call(ctx context.Context, s *session, c *agentsilov1.Call) *agentsilov1.Result {
	m := c.GetMessage()
	if err := g.checkMessage(m); err != nil {
		return errResult(c.GetCallId(), err)
	}
	if err := g.authorizeMessage(s.caller.Load(), m); err != nil {
		return errResult(c.GetCallId(), err)
	}
	stamp(m, s.addr)
	r, err := g.dispatch(ctx, m, time.Duration(c.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return errResult(c.GetCallId(), err)
	}
	return &agentsilov1.Result{CallId: c.GetCallId(), Message: r}
}

// frameFault reports whether a Send failed for the frame itself (gRPC could
// not encode it, or it is over the size limit) rather than for the stream.
func frameFault(err error) bool {
	switch status.Code(err) {
	case codes.Internal, codes.ResourceExhausted:
		return true
	}
	return false
}

func errResult(id uint64, err error) *agentsilov1.Result {
	// A refusal before any agent ran the call (grain.ErrNotRun, whose
	// errors say so with a method NotRun) tells the client so.
	var nr interface{ NotRun() bool }
	return &agentsilov1.Result{CallId: id, Error: &agentsilov1.Status{Code: int32(errs.Code(err)), Message: err.Error()}, NotRun: errors.As(err, &nr) && nr.NotRun()}
}
