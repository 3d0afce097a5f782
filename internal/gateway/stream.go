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
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A Session stream runs on three goroutines:
//   - the handler (Session, then sessionStream.serve) takes the frames the
//     reader hands it, starts calls (each on its own goroutine, see
//     startCall), cancels them, and ends the stream on EOF, on
//     GracefulStop, or when the client reads none of its results;
//   - the reader (readFrames) blocks in Recv, which nothing else can
//     interrupt, and hands frames to the handler;
//   - the writer (write, session.go) writes the session's queue: results
//     and pushes, in order.

// Session implements agentsilov1.GatewayServer: a client's long-lived
// stream. It reads the Hello, finds or makes the session, attaches the
// stream to it, answers with a Welcome, and serves the stream's frames.
func (g *Gateway) Session(stream agentsilov1.Gateway_SessionServer) error {
	ctx := stream.Context()
	s, resumed, err := g.hello(ctx, stream)
	if err != nil {
		return err
	}
	att := newAttachment(stream)
	if err := g.attach(ctx, s, att); err != nil {
		return err
	}
	st := &sessionStream{g: g, s: s, att: att, stream: stream}
	st.ctx, st.cancel = context.WithCancel(ctx)
	if c := acl.CallerFrom(ctx); c != nil && !c.Expires.IsZero() {
		st.expiry = time.NewTimer(time.Until(c.Expires))
	}
	defer st.end()
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
	go g.write(st.ctx, s, att)
	frames, readErr := g.readFrames(st.ctx, stream)
	return st.serve(frames, readErr)
}

// hello reads a session stream's Hello and finds the session it resumes,
// or makes one (resumed false), for the caller it proves.
func (g *Gateway) hello(ctx context.Context, stream agentsilov1.Gateway_SessionServer) (*session, bool, error) {
	// A stream whose credentials prove its principal counts against that
	// principal's streams awaiting a Hello until it has sent one.
	helloDone := func() {}
	if c := acl.CallerFrom(ctx); c != nil {
		done, err := g.principals.hello(c.Principal)
		if err != nil {
			return nil, false, err
		}
		helloDone = done
	}
	first, err := g.recvHello(ctx, stream)
	helloDone()
	if err != nil {
		return nil, false, err
	}
	if err := decodeError(first); err != nil {
		return nil, false, err
	}
	hello := first.GetHello()
	if hello == nil {
		return nil, false, errs.New(codes.InvalidArgument, "the first frame of a session must be a Hello")
	}
	if err := g.checkDraining(); err != nil {
		return nil, false, err
	}
	c, err := auth.CallerFor(acl.CallerFrom(ctx), hello.GetPrincipal())
	if err != nil {
		return nil, false, err
	}
	s, resumed, err := g.sessions.open(ctx, c, hello)
	if err != nil {
		return nil, false, err
	}
	if g.testHookOpened != nil {
		g.testHookOpened(s.addr)
	}
	return s, resumed, nil
}

// readFrames starts the stream's reader: Recv cannot be interrupted but by
// returning, so a reader goroutine feeds frames in, and the handler can
// end the stream on GracefulStop. The reader's error (io.EOF: the client
// sends no more) comes on the second channel.
func (g *Gateway) readFrames(ctx context.Context, stream agentsilov1.Gateway_SessionServer) (<-chan *agentsilov1.ClientFrame, <-chan error) {
	frames := make(chan *agentsilov1.ClientFrame)
	readErr := make(chan error, 1)
	read := func() {
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
	}
	if !g.spawn(read) {
		readErr <- errs.New(codes.Unavailable, "gateway %s is stopping", g.cfg.Silo)
	}
	return frames, readErr
}

// sessionStream is the handler's state for one attached Session stream.
type sessionStream struct {
	g      *Gateway
	s      *session
	att    *attachment
	stream agentsilov1.Gateway_SessionServer

	ctx    context.Context // ends the calls, the reader and the writer
	cancel context.CancelFunc
	calls  sync.WaitGroup // the calls started on the stream

	stall   *time.Timer // running while the stream is over its budget
	stalled bool        // the stream was ended for not reading its results

	// expiry runs until the stream's credentials expire (a token's), when
	// the stream ends; nil if they do not.
	expiry *time.Timer
}

// end cancels what the stream started, waits for its calls and its writer,
// and detaches it. A stream ended because its client does not read returns
// at once: its writer may be stuck in Send until the stream ends, so the
// clean-up waits for it after the handler has returned.
func (st *sessionStream) end() {
	if st.stall != nil {
		st.stall.Stop()
	}
	if st.expiry != nil {
		st.expiry.Stop()
	}
	cleanup := func() {
		st.cancel()
		st.calls.Wait()
		<-st.att.writerDone
		st.g.detach(st.s, st.att)
	}
	if !st.stalled {
		cleanup()
		return
	}
	later := func() {
		cleanup()
		st.g.cutOff(st.stream.Context())
	}
	if !st.g.spawn(later) {
		// Stop has cut every connection: the writer's Send returns.
		later()
	}
}

// finish lets the calls in flight end, writes what is queued, and ends
// the stream with err.
func (st *sessionStream) finish(err error) error {
	st.calls.Wait()
	close(st.att.flush)
	<-st.att.writerDone
	return err
}

// serve handles the stream's frames until it ends, and returns how.
func (st *sessionStream) serve(frames <-chan *agentsilov1.ClientFrame, readErr <-chan error) error {
	g, s, limits := st.g, st.s, &st.g.cfg.Limits
	var expired <-chan time.Time
	if st.expiry != nil {
		expired = st.expiry.C
	}
	for {
		in, stallC := st.budget(frames)
		select {
		case <-expired:
			// The token the stream was opened with expired: the calls
			// started get their results, and the client attaches the
			// session again with fresh credentials (the SDK does by
			// itself), which the gateway checks as any stream's.
			return st.finish(errs.New(codes.Unauthenticated, "session %s: the credentials it was attached with expired; attach it again with fresh ones", s.addr))
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				// The client sends no more.
				return st.finish(nil)
			}
			return err
		case <-st.ctx.Done():
			// The client is gone (the reader may have stopped on this too).
			return st.ctx.Err()
		case <-g.drain:
			// Every call started on this stream has its result written
			// before the stream ends; the trailer tells the client that the
			// calls it is still waiting for were never started, so it may
			// send them again through another gateway.
			st.stream.SetTrailer(metadata.Pairs(protocol.DrainedTrailer, "1"))
			return st.finish(g.checkDraining())
		case <-st.att.room:
		case <-stallC:
			st.stall = nil
			if s.stalled(st.att, limits.StallTimeout) {
				g.logger.Warn("session stream ended: its client reads none of its results", "session", s.addr, "after", limits.StallTimeout)
				if g.testHookStallEnd != nil {
					g.testHookStallEnd(s.addr)
				}
				st.stalled = true
				return errs.New(codes.ResourceExhausted, "session %s: the client has read no result for %v while %d calls were pending", s.addr, limits.StallTimeout, limits.SessionPending)
			}
		case f := <-in:
			if done, err := st.frame(f); done {
				return err
			}
		}
	}
}

// budget returns the channel to read frames from: frames, or nil while the
// stream is over its budget. Over it, the stream's frames are not read
// (HTTP/2 flow control holds the client back) until calls end and results
// are written; a client that reads nothing meanwhile is cut off when the
// stall timer, whose channel budget returns too, fires.
func (st *sessionStream) budget(frames <-chan *agentsilov1.ClientFrame) (<-chan *agentsilov1.ClientFrame, <-chan time.Time) {
	limits := &st.g.cfg.Limits
	if st.s.hasRoom(st.att, limits) {
		if st.stall != nil {
			st.stall.Stop()
			st.stall = nil
		}
		return frames, nil
	}
	if st.stall == nil {
		st.stall = time.NewTimer(limits.StallTimeout)
		if st.g.testHookStalled != nil {
			st.g.testHookStalled(st.s.addr)
		}
	}
	return nil, st.stall.C
}

// frame handles one frame after the Hello; done says the stream ends, with
// err.
func (st *sessionStream) frame(f *agentsilov1.ClientFrame) (done bool, _ error) {
	if err := decodeError(f); err != nil {
		// A Call whose id could be read fails alone; a frame that says
		// nothing readable ends the stream.
		if c := f.GetCall(); c != nil {
			st.s.result(st.att, 0, errResult(c.GetCallId(), err))
			return false, nil
		}
		return true, err
	}
	switch f := f.Frame.(type) {
	case *agentsilov1.ClientFrame_Call:
		st.g.startCall(st.ctx, st.s, st.att, f.Call, &st.calls)
	case *agentsilov1.ClientFrame_Cancel:
		st.att.mu.Lock()
		if cancel := st.att.calls[f.Cancel.GetCallId()]; cancel != nil {
			cancel()
		}
		st.att.mu.Unlock()
	case *agentsilov1.ClientFrame_Hello:
		// A stream takes one Hello. The calls it started still run and
		// have their results written, as on a half-close, before the
		// stream ends; the session stays, to resume.
		return true, st.finish(errs.New(codes.InvalidArgument, "session %s: a second Hello on its stream (a stream takes one; open another stream to resume the session)", st.s.addr))
	default:
		return true, errs.New(codes.InvalidArgument, "unexpected frame %T after Hello", f)
	}
	return false, nil
}
