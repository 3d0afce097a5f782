package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// server serves the Peer service for a Transport.
type server struct {
	agentsilov1.UnimplementedPeerServer
	t *Transport
	h Handler
}

// Stream serves one peer's stream: gRPC calls it on a goroutine per stream.
// It writes the responses; a reader goroutine reads the peer's envelopes
// and queues each on one of the stream's lanes, chosen by the receiver's
// address, so that everything one sender sends one receiver (requests,
// one-way messages, events) is handed on in the order sent.
func (s server) Stream(srv agentsilov1.Peer_StreamServer) error {
	t := s.t
	if !t.enter() {
		return errs.New(codes.Unavailable, "silo %s: transport closed", t.cfg.Self)
	}
	defer t.wg.Done()
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	in := &inbound{
		t:     t,
		h:     s.h,
		ctx:   ctx,
		rdone: make(chan struct{}),
	}
	in.out.init(t.cfg.QueueSize)
	in.calls.values = context.WithoutCancel(ctx)
	defer in.calls.close(t.ctx)
	for i := range in.lanes {
		in.lanes[i].init(max(t.cfg.QueueSize/numLanes, 64))
		in.runLane[i] = func() { in.lane(&in.lanes[i], &in.busy[i]) }
	}
	// The peer speaks first: this silo says who it is only to a peer whose
	// certificate names the silo its hello claims.
	first, err := t.recvHello(ctx, srv)
	if err != nil {
		return err
	}
	in.from = first.Hello.Silo
	if err := srv.Send(t.hello()); err != nil {
		return err
	}
	in.w.open(srv.Send, cancel)
	defer in.w.shut() // before this handler returns: no Send after that
	// The reader ends when this handler has returned and gRPC has ended the
	// stream, if not before; Close waits for it.
	t.wg.Add(1)
	go in.read(srv, first)
	w := batcher{t: t, batch: &agentsilov1.PeerBatch{}}
	for {
		it, ok := in.out.take()
		if !ok {
			select {
			case <-in.out.ready:
			case <-in.rdone:
				if errors.Is(in.rerr, io.EOF) {
					// The peer closed its side (its stream was idle): what
					// it sent is handed on before the stream ends.
					in.laneWG.Wait()
					return nil
				}
				return in.rerr
			case <-ctx.Done():
				if t.ctx.Err() != nil {
					return errs.New(codes.Unavailable, "silo %s: transport closed", t.cfg.Self)
				}
				return ctx.Err()
			}
			continue
		}
		in.w.mu.Lock()
		w.fill(it, &in.out)
		err := w.flush(srv.Send)
		in.w.queued.Add(-int64(w.taken))
		in.w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// inbound is one stream a peer opened to this silo.
type inbound struct {
	h       Handler // what the peer's envelopes are for
	t       *Transport
	ctx     context.Context // ends with the stream or the transport
	from    string          // the peer's silo name, from its hello
	out     queue[item]     // responses for the writer
	w       writer          // writes the responses
	serving atomic.Int64    // requests read and not yet answered
	lanes   [numLanes]queue[laneItem]
	busy    [numLanes]atomic.Int32 // envelopes on each lane, queued or being handed on
	runLane [numLanes]func()       // each lane's goroutine, started while the lane is busy
	laneWG  sync.WaitGroup         // the lanes' goroutines, started by the reader only
	calls   calls                  // the requests being handled
	rdone   chan struct{}          // closed when the reader ends
	rerr    error
}

// laneItem is an envelope on its way to the handler, with its call if it
// is a request (nil if its deadline had passed on arrival).
type laneItem struct {
	env   *Envelope
	call  *callCtx
	tried bool // TryHandleRequest left it to the lane
}

// numLanes is the number of ordered lanes of an inbound stream: a slow
// receiver holds up the receivers that share its lane, not the stream.
const numLanes = 16

// lane returns the lane of the receiver to.
func lane(to string) int {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(to); i++ {
		h ^= uint32(to[i])
		h *= 16777619
	}
	return int(h % numLanes)
}

// recvHello reads the first batch of a peer's stream, within
// ConnectTimeout, and checks it: a hello, from a peer whose certificate
// (with TLS) names the silo the hello claims.
func (t *Transport) recvHello(ctx context.Context, srv agentsilov1.Peer_StreamServer) (*agentsilov1.PeerBatch, error) {
	type recv struct {
		b   *agentsilov1.PeerBatch
		err error
	}
	ch := make(chan recv, 1)
	// Recv returns when the handler has returned and gRPC ended the stream,
	// if not before; Close waits for it.
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		b, err := srv.Recv()
		ch <- recv{b, err}
	}()
	timer := time.NewTimer(t.cfg.ConnectTimeout)
	defer timer.Stop()
	var first *agentsilov1.PeerBatch
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		first = r.b
	case <-timer.C:
		return nil, errs.New(codes.DeadlineExceeded, "silo %s: no hello within %v of opening a peer stream", t.cfg.Self, t.cfg.ConnectTimeout)
	case <-ctx.Done():
		if t.ctx.Err() != nil {
			return nil, errs.New(codes.Unavailable, "silo %s: transport closed", t.cfg.Self)
		}
		return nil, ctx.Err()
	}
	if first.GetHello() == nil {
		return nil, errs.New(codes.InvalidArgument, "the first batch on a peer stream must carry a hello")
	}
	if err := t.checkPeer(srv.Context(), first.Hello.Silo); err != nil {
		t.logger.Warn("peer stream refused", "err", err)
		return nil, err
	}
	return first, nil
}

// read hands on what the peer sends, from first, its checked hello batch.
func (in *inbound) read(srv agentsilov1.Peer_StreamServer, first *agentsilov1.PeerBatch) {
	t := in.t
	defer t.wg.Done()
	defer close(in.rdone)
	b := first
	for {
		// The batch's requests count as served from now on, so that the
		// replies of the first ones, if quick, queue to go out together
		// instead of each being written alone (see respond).
		n := 0
		for _, e := range b.Envelopes {
			if e.Kind == agentsilov1.Kind_KIND_REQUEST && !e.Cancel {
				n++
			}
		}
		in.serving.Add(int64(n))
		for _, e := range b.Envelopes {
			if e.Cancel {
				in.calls.cancel(e.CallId)
				continue
			}
			switch e.Kind {
			case agentsilov1.Kind_KIND_REQUEST, agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT:
				li := laneItem{env: e}
				if e.Kind == agentsilov1.Kind_KIND_REQUEST {
					// Registered here, not on the lane, so that a cancel
					// notice right behind it finds it.
					li.call = in.calls.add(e)
				}
				l := lane(e.GetMessage().GetTo())
				if li.call != nil && in.busy[l].Load() == 0 {
					if in.tryAsync(e, li.call) {
						// Taken here, with nothing ahead of it on its
						// lane: the lane's goroutine is not woken for it.
						continue
					}
					li.tried = true
				}
				if in.busy[l].Add(1) == 1 {
					// The lane was idle and has no goroutine: start one
					// (see lane). An idle peer costs no lane goroutines.
					t.wg.Add(1)
					in.laneWG.Add(1)
					go in.runLane[l]()
				}
				if in.lanes[l].put(li, in.ctx.Done(), nil) != 0 {
					in.rerr = in.ctx.Err()
					return
				}
			default:
				t.logger.Warn("peer sent an envelope of unexpected kind", "peer", in.from, "kind", e.Kind)
			}
		}
		// The batch is read into again: what was handed on from it are
		// its envelopes, not the batch.
		if err := srv.RecvMsg(b); err != nil {
			in.rerr = err
			return
		}
	}
}

// handlerCtx returns the context of a one-way env's handler: it ends at env's
// deadline (shared with the other envelopes due in the same tick, so no timer
// per request) or when the transport closes; without a deadline, it is ctx,
// which also ends with the stream. ok is false if the deadline has passed.
func (t *Transport) handlerCtx(ctx context.Context, env *Envelope) (context.Context, context.CancelFunc, bool) {
	if env.DeadlineUnixMs == 0 {
		return ctx, func() {}, true
	}
	dl := time.UnixMilli(env.DeadlineUnixMs)
	if !time.Now().Before(dl) {
		return ctx, func() {}, false
	}
	return t.deadlines.Context(context.Background(), dl.UnixNano()), func() {}, true
}

// AsyncHandler is a Handler that can take some requests without a
// goroutine waiting for each: TryHandleRequest returns false, having done
// nothing, for a request it leaves to HandleRequest; when it returns true,
// reply is called once with the result, and must not be held up for long.
// TryHandleRequest must not block either: when the request's lane is empty
// it is called on the stream's reader goroutine (else on the lane's).
type AsyncHandler interface {
	TryHandleRequest(ctx context.Context, from string, env *Envelope, reply func(*agentsilov1.AgentMessage, error)) bool
}

// OrderedHandler is a Handler that can hand a request on in order: PostRequest
// returns once the request has taken its place behind what its sender sent
// its receiver before (a mailbox post, which may activate the receiver and
// wait for room, as HandleOneWay does), and calls reply once with the
// result, later, from any goroutine. It is called on the stream's lane of
// the receiver, as HandleOneWay is. Without it, a request that
// TryHandleRequest does not take runs on a goroutine of its own, and may
// overtake one-way messages sent before it.
type OrderedHandler interface {
	PostRequest(ctx context.Context, from string, env *Envelope, reply func(*agentsilov1.AgentMessage, error))
}

// request hands the request env on, in its lane's order when the handler
// can (see OrderedHandler). c is its handler's context, nil if its deadline
// had passed when it arrived; tried, that TryHandleRequest declined it.
func (in *inbound) request(env *Envelope, c *callCtx, tried bool) {
	if c == nil {
		in.respond(env, nil, nil, errs.New(codes.DeadlineExceeded, "request to %s arrived after its deadline, so it did not run", env.GetMessage().GetTo()))
		return
	}
	if !tried && in.tryAsync(env, c) {
		return
	}
	t := in.t
	oh, ok := in.h.(OrderedHandler)
	if !ok {
		t.wg.Add(1)
		t.workers.run(t, func() { in.serve(env, c) })
		return
	}
	t.wg.Add(1)
	var once sync.Once
	reply := func(msg *agentsilov1.AgentMessage, err error) {
		once.Do(func() {
			defer t.wg.Done()
			in.respond(env, c, msg, err)
		})
	}
	defer func() {
		if r := recover(); r != nil {
			t.logger.Error("peer request handler panicked", "peer", in.from, "to", env.GetMessage().GetTo(), "panic", r)
			reply(nil, errs.New(codes.Internal, "request to %s: handler panicked (it may have run): %v", env.GetMessage().GetTo(), r))
		}
	}()
	oh.PostRequest(c, in.from, env, reply)
}

// tryAsync hands env to the handler's TryHandleRequest, if it has one and
// takes it.
func (in *inbound) tryAsync(env *Envelope, c *callCtx) bool {
	t := in.t
	ah, ok := in.h.(AsyncHandler)
	if !ok {
		return false
	}
	t.wg.Add(1)
	taken := ah.TryHandleRequest(c, in.from, env, func(msg *agentsilov1.AgentMessage, err error) {
		defer t.wg.Done()
		in.respond(env, c, msg, err)
	})
	if !taken {
		t.wg.Done()
	}
	return taken
}

// serve handles one request and queues its response.
func (in *inbound) serve(env *Envelope, c *callCtx) {
	defer in.t.wg.Done()
	msg, err := in.handle(c, env)
	in.respond(env, c, msg, err)
}

// respond queues the response to the request env, whose call c (if not nil)
// is then forgotten.
func (in *inbound) respond(env *Envelope, c *callCtx, msg *agentsilov1.AgentMessage, err error) {
	t := in.t
	var resp *Envelope
	if c != nil {
		in.calls.remove(c)
		resp = &c.resp
	} else {
		resp = new(Envelope)
	}
	resp.Kind, resp.CallId = agentsilov1.Kind_KIND_RESPONSE, env.CallId
	size := 64
	if err == nil && msg != nil {
		if n := messageSize(msg); n > t.cfg.MaxMessageSize {
			err = errs.New(codes.ResourceExhausted, "the turn ran, but its reply of %d bytes exceeds the maximum of %d", n, t.cfg.MaxMessageSize)
		} else if cerr := protocol.CheckMessage(msg); cerr != nil {
			// It would fail its batch and break the stream: the caller gets
			// the handler's fault instead.
			err = errs.New(codes.Internal, "the turn ran, but the reply of %s cannot be sent: %s", protocol.Clip(msg.GetFrom()), errMessage(cerr))
		} else {
			size += n
		}
	}
	if err != nil {
		code := errs.Code(err)
		if code == codes.Unknown || code == codes.OK {
			code = codes.Internal
		}
		resp.Error = &agentsilov1.Status{Code: int32(code), Message: errMessage(err)}
		var nr interface{ NotRun() bool }
		resp.NotRun = errors.As(err, &nr) && nr.NotRun()
	} else {
		resp.Message = msg
	}
	// The only reply in flight is written at once if it can be: there is
	// nothing to batch it with. See peer.enqueue.
	it := item{env: resp, size: size}
	if in.serving.Add(-1) == 0 && in.w.direct(t, it) {
		return
	}
	in.w.queued.Add(1)
	if in.out.put(it, in.ctx.Done(), nil) != 0 {
		in.w.queued.Add(-1)
	}
}

// handle calls HandleRequest, turning a panic into Internal.
func (in *inbound) handle(ctx context.Context, env *Envelope) (msg *agentsilov1.AgentMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			in.t.logger.Error("peer request handler panicked", "peer", in.from, "to", env.GetMessage().GetTo(), "panic", r)
			msg, err = nil, errs.New(codes.Internal, "request to %s: handler panicked (it may have run): %v", env.GetMessage().GetTo(), r)
		}
	}()
	return in.h.HandleRequest(ctx, in.from, env)
}

// lane hands on the envelopes of one of the stream's lanes, in order. The
// reader starts it when it queues an envelope on an idle lane (busy from 0
// to 1); it ends once it has handed on every envelope queued (busy back to
// 0), so that one goroutine at most serves a lane, each after the one
// before has handed on everything queued before it.
func (in *inbound) lane(envs *queue[laneItem], busy *atomic.Int32) {
	defer in.t.wg.Done()
	defer in.laneWG.Done()
	done := in.ctx.Done()
	for {
		select {
		case <-done:
			return
		default:
		}
		li, ok := envs.take()
		if !ok {
			select {
			case <-envs.ready:
			case <-done:
				return
			}
			continue
		}
		if li.env.Kind == agentsilov1.Kind_KIND_REQUEST {
			in.request(li.env, li.call, li.tried)
		} else {
			in.oneWay(li.env)
		}
		if busy.Add(-1) == 0 {
			return
		}
	}
}

func (in *inbound) oneWay(env *Envelope) {
	ctx, cancel, ok := in.t.handlerCtx(in.ctx, env)
	defer cancel()
	if !ok {
		in.t.logger.Debug("one-way message arrived after its deadline", "peer", in.from, "to", env.GetMessage().GetTo())
		return
	}
	defer func() {
		if r := recover(); r != nil {
			in.t.logger.Error("peer one-way handler panicked", "peer", in.from, "to", env.GetMessage().GetTo(), "panic", r)
		}
	}()
	in.h.HandleOneWay(ctx, in.from, env)
}
