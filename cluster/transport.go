package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/grain/errs"
	"github.com/agentsilo/agentsilo/internal/deadline"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Envelope is one silo-to-silo message: an AgentMessage with its routing
// fields (kind, call id, view version, hops, deadline, error).
type Envelope = agentsilov1.PeerEnvelope

// TransportHandler is what a silo does with the envelopes its peers send it.
// The transport calls it from the goroutines of its tpInbound streams; from is
// the sending silo's name, as its stream's hello declared it.
type TransportHandler interface {
	// HandleRequest handles a REQUEST and returns the reply (or an error,
	// whose errs code travels back to the caller; an error without a code
	// becomes Internal, and so does a panic). Each request runs on a
	// goroutine of its own, concurrently with every other request and
	// one-way message, so a slow handler never holds up the stream. ctx ends
	// at the request's deadline (env.DeadlineUnixMs; a request without one:
	// when the stream from the peer breaks) or when the transport closes; a handler must return
	// soon after ctx ends, as Close waits for it.
	HandleRequest(ctx context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error)
	// HandleOneWay handles a ONE_WAY message or an EVENT. The one-way
	// envelopes of one tpInbound stream (that is, from one peer) are handled one
	// at a time, in the order the peer sent them, on one goroutine per
	// stream, concurrently with requests and with other peers' streams. It
	// should only hand the message on (a mailbox post, which may wait briefly
	// for room): while it runs, the next one-way messages from that peer
	// queue, and once that queue is full the peer's whole stream waits. ctx
	// ends at the envelope's deadline if it has one, when the stream breaks,
	// or when the transport closes.
	HandleOneWay(ctx context.Context, from string, env *Envelope)
}

// TransportConfig configures a Transport. Zero fields get the defaults named
// on them.
type TransportConfig struct {
	// Self is this silo's name, sent in the hello of every stream it opens
	// or accepts.
	Self string
	// Logger receives the transport's logs. Default: slog.Default().
	Logger *slog.Logger
	// MaxMessageSize bounds an AgentMessage's encoded size; a larger one is
	// refused with ResourceExhausted before it is sent, and a larger reply is
	// answered with ResourceExhausted. Default: 4 MiB.
	MaxMessageSize int
	// QueueSize bounds the envelopes queued for one peer (and the responses
	// queued on one tpInbound stream). A full queue makes the sender wait,
	// bounded by its context. Default: 10000.
	QueueSize int
	// MaxBatch bounds the envelopes sent in one stream message. Default: 256.
	MaxBatch int
	// ConnectTimeout bounds opening a stream to a peer, hellos included.
	// Default: 5 s.
	ConnectTimeout time.Duration
	// MaxBackoff caps the wait between attempts to reopen a broken stream;
	// the wait starts at 50 ms and doubles. Default: 2 s.
	MaxBackoff time.Duration
	// DialOptions are added to the transport's own when it dials a peer
	// (after them, so they win): e.g. transport credentials. The default is
	// an insecure connection.
	DialOptions []grpc.DialOption
	// Handler receives the requests and one-way messages that peers send.
	// Required.
	Handler TransportHandler
}

// TransportStats counts the stream messages a transport has handed to gRPC
// (on its own streams, and the responses on the streams it accepted).
type TransportStats struct {
	Batches   uint64 // stream messages carrying envelopes
	Envelopes uint64 // envelopes in them
	MaxBatch  uint64 // the most envelopes one stream message carried
}

// Transport is the silo-to-silo transport. It keeps one long-lived Peer
// stream to each peer it sends to, opened on first use: requests, one-way
// messages and events go out on it, and the peer answers requests on the
// same stream. What a peer sends this silo comes in on the stream that peer
// opened (Register serves them), so two silos that talk both ways hold one
// stream per direction. That choice keeps each stream simple: one side
// allocates its call ids, the two sides never race to dial each other and
// need no tie-break, and a broken stream affects one direction's calls only.
//
// Each peer has a bounded queue drained by one sender goroutine, which puts
// everything queued (up to MaxBatch envelopes) into one stream message: when
// idle, an envelope goes out at once; when busy, batches form by themselves.
// A slow or dead peer fills only its own queue. When a peer's stream breaks,
// its pending Asks fail at once with Unavailable (the caller may retry), and
// the transport reopens the stream in the background, waiting 50 ms, then
// twice as long after each failed attempt, up to MaxBackoff. While it waits,
// Asks and Sends to that peer fail at once with Unavailable; while an attempt
// is under way (at most ConnectTimeout), they queue. The transport keeps
// retrying a peer until ClosePeer: the silo calls it when the peer leaves the
// view.
//
// Errors carry grain/errs codes. All methods are safe for concurrent use.
type Transport struct {
	cfg    TransportConfig
	logger *slog.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	view   atomic.Int64
	dial   []grpc.DialOption
	limit  int // gRPC message size limit

	mu     sync.RWMutex
	peers  map[string]*tpPeer
	closed bool
	wg     sync.WaitGroup // every goroutine the transport starts

	batches, envelopes, maxBatch atomic.Uint64

	workers   tpWorkers      // reused goroutines for inbound requests
	deadlines deadline.Slots // the deadlines of inbound envelopes

	// Hooks, set before any traffic: called on a peer's state changes (the
	// silo reports broken streams to its membership through it; tests use
	// it too), and, for tests, by a sender before it fills a batch and after
	// an envelope is queued.
	hookState      func(addr string, up bool)
	hookBeforeSend func(addr string)
	hookEnqueued   func(addr string)
}

// NewTransport returns a transport; it starts no goroutine until it is used
// or serves a stream.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if cfg.Handler == nil {
		return nil, errors.New("cluster: TransportConfig.Handler is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = 4 << 20
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 10000
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 256
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	switch {
	case cfg.MaxMessageSize < 1024:
		return nil, fmt.Errorf("cluster: transport MaxMessageSize %d must be at least 1024", cfg.MaxMessageSize)
	case cfg.QueueSize < 1:
		return nil, fmt.Errorf("cluster: transport QueueSize %d must be at least 1", cfg.QueueSize)
	case cfg.MaxBatch < 1:
		return nil, fmt.Errorf("cluster: transport MaxBatch %d must be at least 1", cfg.MaxBatch)
	case cfg.ConnectTimeout < 0 || cfg.MaxBackoff < 0:
		return nil, errors.New("cluster: transport ConnectTimeout and MaxBackoff must not be negative")
	}
	t := &Transport{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "transport", "silo", cfg.Self),
		peers:  make(map[string]*tpPeer),
		limit:  cfg.MaxMessageSize + frameOverhead,
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.dial = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(t.limit), grpc.MaxCallSendMsgSize(t.limit)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: tpMinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.MaxBackoff},
			MinConnectTimeout: cfg.ConnectTimeout,
		}),
		// Notice a peer that vanished without closing its connections.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}, cfg.DialOptions...)
	return t, nil
}

const tpMinBackoff = 50 * time.Millisecond

// ServerOptions returns the gRPC server options the server that Register
// serves the Peer service on needs: message size limits matching
// MaxMessageSize, and a keepalive policy that accepts the transport's pings
// (gRPC's default policy would end idle peer streams).
func (t *Transport) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(t.limit),
		grpc.MaxSendMsgSize(t.limit),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
}

// Register serves the Peer service on s, the silo's peer server, which
// should be made with ServerOptions. Call it before s serves.
func (t *Transport) Register(s *grpc.Server) {
	agentsilov1.RegisterPeerServer(s, tpServer{t: t})
}

// SetViewVersion sets the membership view version sent in the hellos of the
// streams opened or accepted from now on.
func (t *Transport) SetViewVersion(v int64) { t.view.Store(v) }

// Stats returns the transport's counters.
func (t *Transport) Stats() TransportStats {
	return TransportStats{Batches: t.batches.Load(), Envelopes: t.envelopes.Load(), MaxBatch: t.maxBatch.Load()}
}

// Ask sends env's message as a REQUEST to the peer at peerAddr (its peer
// listener's host:port) and waits for the reply. env.Message is required;
// env.ViewVersion and env.Hops travel as set; Ask sets Kind, CallId and, from
// ctx's deadline, DeadlineUnixMs (keeping an earlier one already set). env
// belongs to the transport from the call on.
//
// It fails with ResourceExhausted for a message over MaxMessageSize, with
// Unavailable while the peer's stream is broken or when it breaks before the
// reply comes (the request may or may not have been handled), with
// DeadlineExceeded or Canceled when ctx ends (also while waiting for room in
// a full queue; with a ctx that can never end, a full queue is
// ResourceExhausted at once), and with the handler's error code otherwise.
func (t *Transport) Ask(ctx context.Context, peerAddr string, env *Envelope) (*agentsilov1.AgentMessage, error) {
	size, err := t.check(ctx, env)
	if err != nil {
		return nil, err
	}
	p, err := t.peer(peerAddr)
	if err != nil {
		return nil, err
	}
	env.Kind = agentsilov1.Kind_KIND_REQUEST
	c := &tpCall{done: make(chan tpResult, 1)}
	env.CallId = p.nextID.Add(1)
	if err := p.register(env.CallId, c); err != nil {
		return nil, err
	}
	if err := p.enqueue(ctx, tpItem{env: env, size: size, call: c}); err != nil {
		if !p.forget(env.CallId) {
			r := <-c.done // failed meanwhile: prefer that answer
			return r.msg, r.err
		}
		return nil, err
	}
	select {
	case r := <-c.done:
		return r.msg, r.err
	case <-ctx.Done():
		if !p.forget(env.CallId) {
			r := <-c.done
			return r.msg, r.err
		}
		return nil, tpCtxErr(ctx, "ask peer "+peerAddr)
	}
}

// Send queues env's message for the peer at peerAddr as a ONE_WAY message,
// or as an EVENT if env.Kind is KIND_EVENT, and returns once it is queued;
// the one-way messages to one peer arrive in the order they were queued.
// Delivery is at most once: a message still queued or in flight when the
// peer's stream breaks is lost (and logged). Errors are as for Ask, without
// the reply.
func (t *Transport) Send(ctx context.Context, peerAddr string, env *Envelope) error {
	size, err := t.check(ctx, env)
	if err != nil {
		return err
	}
	p, err := t.peer(peerAddr)
	if err != nil {
		return err
	}
	if env.Kind != agentsilov1.Kind_KIND_EVENT {
		env.Kind = agentsilov1.Kind_KIND_ONE_WAY
	}
	env.CallId = 0
	if err := p.usable(); err != nil {
		return err
	}
	return p.enqueue(ctx, tpItem{env: env, size: size})
}

// ClosePeer closes the stream to the peer at peerAddr, if there is one,
// failing its pending Asks with Unavailable, and forgets the peer: the next
// Ask or Send to it dials anew. The silo calls it when a peer leaves the view.
func (t *Transport) ClosePeer(peerAddr string) {
	t.mu.Lock()
	p := t.peers[peerAddr]
	delete(t.peers, peerAddr)
	t.mu.Unlock()
	if p != nil {
		p.cancel()
		<-p.stopped
	}
}

// Redial drops the peer at addr if its stream is down, so that the next call
// dials at once instead of waiting out the reconnect backoff: for a peer
// known to have restarted.
func (t *Transport) Redial(addr string) {
	t.mu.RLock()
	p := t.peers[addr]
	t.mu.RUnlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	down := p.state == tpDown
	p.mu.Unlock()
	if down {
		t.ClosePeer(addr)
	}
}

// Close stops the transport: its streams end, pending Asks fail with
// Unavailable, and it returns once every goroutine it started has ended
// (request handlers included, so they must respect their ctx). Later calls
// fail with Unavailable. Close does not stop the gRPC server Register served
// on.
func (t *Transport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.workers.close()
	t.deadlines.Close()
	t.wg.Wait()
}

// tpWorkers runs inbound requests on goroutines that park between requests
// (at most tpMaxIdle of them), so that a request does not pay for a fresh
// goroutine's stack growth.
type tpWorkers struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

const tpMaxIdle = 128

func (w *tpWorkers) run(t *Transport, f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 && !w.closed {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- f
		return
	}
	w.mu.Unlock()
	t.wg.Add(1)
	go w.work(t, f)
}

func (w *tpWorkers) work(t *Transport, f func()) {
	defer t.wg.Done()
	ch := make(chan func())
	for f != nil {
		f()
		w.mu.Lock()
		if w.closed || len(w.idle) >= tpMaxIdle {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		f = <-ch
	}
}

// close ends the parked workers.
func (w *tpWorkers) close() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, ch := range idle {
		close(ch)
	}
}

// check validates env and returns its message's size.
func (t *Transport) check(ctx context.Context, env *Envelope) (int, error) {
	if env == nil || env.Message == nil {
		return 0, errs.New(codes.InvalidArgument, "envelope without a message")
	}
	size := proto.Size(env.Message)
	if size > t.cfg.MaxMessageSize {
		return 0, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d", size, t.cfg.MaxMessageSize)
	}
	if dl, ok := ctx.Deadline(); ok {
		if ms := dl.UnixMilli(); env.DeadlineUnixMs == 0 || ms < env.DeadlineUnixMs {
			env.DeadlineUnixMs = ms
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, tpCtxErr(ctx, "send to peer")
	}
	return size + 32, nil // room for the envelope's own fields
}

// peer returns the peer at addr, starting it if it is new.
func (t *Transport) peer(addr string) (*tpPeer, error) {
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
		return nil, errs.New(codes.InvalidArgument, "peer address %q: %v", clip(addr), err)
	}
	p = &tpPeer{
		t:       t,
		addr:    addr,
		conn:    conn,
		client:  agentsilov1.NewPeerClient(conn),
		queue:   make(chan tpItem, t.cfg.QueueSize),
		pending: make(map[uint64]*tpCall),
		stopped: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	t.peers[addr] = p
	t.wg.Add(1)
	go p.run()
	return p, nil
}

// enter counts a goroutine in wg unless the transport is closed.
func (t *Transport) enter() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *Transport) hello() *agentsilov1.PeerBatch {
	return &agentsilov1.PeerBatch{Hello: &agentsilov1.PeerHello{Silo: t.cfg.Self, ViewVersion: t.view.Load()}}
}

// count records a batch of n envelopes written.
func (t *Transport) count(n int) {
	t.batches.Add(1)
	t.envelopes.Add(uint64(n))
	for {
		m := t.maxBatch.Load()
		if uint64(n) <= m || t.maxBatch.CompareAndSwap(m, uint64(n)) {
			return
		}
	}
}

// tpItem is an envelope queued for a stream, with its approximate size and,
// for a request, its call.
type tpItem struct {
	env  *Envelope
	size int
	call *tpCall
}

// tpCall is an Ask waiting for its reply.
type tpCall struct {
	done     chan tpResult // buffered; written once, by whoever removed the call from pending
	finished atomic.Bool   // set when it was removed: a sender skips it
}

type tpResult struct {
	msg *agentsilov1.AgentMessage
	err error
}

type tpState int

const (
	tpConnecting tpState = iota // asks queue until the stream is open
	tpUp
	tpDown // broken, waiting to retry: asks fail at once
)

// tpPeer is the outbound side towards one peer: its queue, its sender (run)
// and the Asks waiting for replies.
type tpPeer struct {
	t       *Transport
	addr    string
	conn    *grpc.ClientConn
	client  agentsilov1.PeerClient
	ctx     context.Context // cancelled by ClosePeer or Close
	cancel  context.CancelFunc
	queue   chan tpItem
	nextID  atomic.Uint64
	stopped chan struct{} // closed when run returns

	mu      sync.Mutex
	state   tpState
	downErr error
	pending map[uint64]*tpCall
}

// usable returns Unavailable while the peer's stream is down.
func (p *tpPeer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == tpDown {
		return p.downErr
	}
	return nil
}

// register adds a pending call, unless the peer is down.
func (p *tpPeer) register(id uint64, c *tpCall) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == tpDown {
		return p.downErr
	}
	p.pending[id] = c
	return nil
}

// forget removes a pending call; false means it was completed meanwhile and
// its result is in its done channel.
func (p *tpPeer) forget(id uint64) bool {
	p.mu.Lock()
	c := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if c != nil {
		c.finished.Store(true)
	}
	return c != nil
}

// complete hands a reply to the call waiting for it, if it still waits.
func (p *tpPeer) complete(id uint64, r tpResult) {
	p.mu.Lock()
	c := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if c != nil {
		c.finished.Store(true)
		c.done <- r
	}
}

// enqueue queues it, waiting for room as long as ctx allows.
func (p *tpPeer) enqueue(ctx context.Context, it tpItem) error {
	select {
	case p.queue <- it:
	default:
		done := ctx.Done()
		if done == nil {
			return errs.New(codes.ResourceExhausted, "queue to peer %s is full (%d envelopes)", p.addr, cap(p.queue))
		}
		select {
		case p.queue <- it:
		case <-done:
			return tpCtxErr(ctx, fmt.Sprintf("queue to peer %s is full (%d envelopes)", p.addr, cap(p.queue)))
		case <-p.ctx.Done():
			return errTransportClosed()
		}
	}
	if h := p.t.hookEnqueued; h != nil {
		h(p.addr)
	}
	return nil
}

func (p *tpPeer) setState(s tpState, err error) {
	p.mu.Lock()
	p.state, p.downErr = s, err
	var failed map[uint64]*tpCall
	if s == tpDown && len(p.pending) > 0 {
		failed, p.pending = p.pending, make(map[uint64]*tpCall)
	}
	p.mu.Unlock()
	for _, c := range failed {
		c.finished.Store(true)
		c.done <- tpResult{err: err}
	}
	if h := p.t.hookState; h != nil && s != tpConnecting {
		h(p.addr, s == tpUp)
	}
}

// run keeps a stream open to the peer until ClosePeer or Close, and sends
// what is queued on it.
func (p *tpPeer) run() {
	defer p.t.wg.Done()
	defer close(p.stopped)
	defer p.conn.Close()
	wait := tpMinBackoff
	logged := false
	for {
		up, err := p.connectAndServe()
		if p.ctx.Err() != nil {
			p.setState(tpDown, errTransportClosed())
			p.drain(errTransportClosed())
			return
		}
		if up {
			wait = tpMinBackoff
		}
		if up || !logged {
			p.t.logger.Warn("peer stream down", "peer", p.addr, "err", err)
			logged = !up
		}
		p.setState(tpDown, errs.New(codes.Unavailable, "peer %s: stream down: %s", p.addr, tpErrMessage(err)))
		// Wait before retrying, failing what is queued meanwhile.
		d := wait/2 + rand.N(wait/2+1)
		timer := time.NewTimer(d)
	backoff:
		for {
			select {
			case <-timer.C:
				break backoff
			case it := <-p.queue:
				p.drop(it)
			case <-p.ctx.Done():
				timer.Stop()
				p.setState(tpDown, errTransportClosed())
				p.drain(errTransportClosed())
				return
			}
		}
		wait = min(2*wait, p.t.cfg.MaxBackoff)
		p.setState(tpConnecting, nil)
	}
}

// drop discards a queued envelope whose stream is down; its call, if any,
// has already failed with the stream.
func (p *tpPeer) drop(it tpItem) {
	if it.call == nil {
		p.t.logger.Debug("one-way message to a peer whose stream is down dropped", "peer", p.addr, "to", it.env.GetMessage().GetTo())
	}
}

// drain drops everything queued.
func (p *tpPeer) drain(err error) {
	for {
		select {
		case it := <-p.queue:
			if it.call != nil && !it.call.finished.Load() {
				p.complete(it.env.CallId, tpResult{err: err})
			}
			p.drop(it)
		default:
			return
		}
	}
}

// connectAndServe opens a stream, exchanges hellos and sends until the stream
// breaks. up reports whether the stream was open.
func (p *tpPeer) connectAndServe() (up bool, err error) {
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
	if err != nil {
		return false, err
	}
	p.t.logger.Debug("peer stream up", "peer", p.addr, "remote", first.Hello.Silo)
	p.setState(tpUp, nil)
	p.deliver(first)

	rdone := make(chan struct{})
	var rerr error
	p.t.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		defer close(rdone)
		for {
			b, err := stream.Recv()
			if err != nil {
				rerr = err
				return
			}
			p.deliver(b)
		}
	}()
	err = p.write(ctx, stream, rdone)
	cancel()
	<-rdone
	if err == nil || errors.Is(err, io.EOF) {
		err = rerr
	}
	return true, err
}

// deliver hands the responses in b to their calls.
func (p *tpPeer) deliver(b *agentsilov1.PeerBatch) {
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
			p.complete(e.CallId, tpResult{err: errs.New(code, "%s", st.Message)})
			continue
		}
		msg := e.Message
		if msg == nil {
			msg = &agentsilov1.AgentMessage{}
		}
		p.complete(e.CallId, tpResult{msg: msg})
	}
}

// write sends what is queued, in batches, until the stream breaks (rdone) or
// ctx ends.
func (p *tpPeer) write(ctx context.Context, stream agentsilov1.Peer_StreamClient, rdone <-chan struct{}) error {
	w := tpBatcher{t: p.t, batch: &agentsilov1.PeerBatch{}}
	for {
		var it tpItem
		if w.carry.env != nil {
			it, w.carry = w.carry, tpItem{}
		} else {
			select {
			case it = <-p.queue:
			case <-rdone:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if h := p.t.hookBeforeSend; h != nil {
			h(p.addr)
		}
		w.fill(it, p.queue)
		if err := w.flush(stream.Send); err != nil {
			return err
		}
	}
}

// tpBatcher fills stream messages from a queue.
type tpBatcher struct {
	t     *Transport
	batch *agentsilov1.PeerBatch
	bytes int
	carry tpItem // taken from the queue but left for the next batch
}

// fill starts a batch with it and adds what else is queued, up to MaxBatch
// envelopes and about MaxMessageSize bytes. Requests whose caller gave up are
// skipped. If nothing else is queued yet, it yields once first (no timer,
// no wait: with nothing else runnable it returns at once), so that callers
// that are about to queue join the batch; under load that is what turns one
// stream message per envelope into batches.
func (w *tpBatcher) fill(it tpItem, q chan tpItem) {
	w.batch.Envelopes = w.batch.Envelopes[:0]
	w.bytes = 0
	w.add(it)
	if len(q) == 0 {
		runtime.Gosched()
	}
	for len(w.batch.Envelopes) < w.t.cfg.MaxBatch {
		select {
		case it := <-q:
			if len(w.batch.Envelopes) > 0 && w.bytes+it.size > w.t.cfg.MaxMessageSize {
				w.carry = it
				return
			}
			w.add(it)
		default:
			return
		}
	}
}

func (w *tpBatcher) add(it tpItem) {
	if it.call != nil && it.call.finished.Load() {
		return
	}
	w.batch.Envelopes = append(w.batch.Envelopes, it.env)
	w.bytes += it.size
}

// flush sends the batch, if it is not empty.
func (w *tpBatcher) flush(send func(*agentsilov1.PeerBatch) error) error {
	n := len(w.batch.Envelopes)
	if n == 0 {
		return nil
	}
	w.t.count(n)
	err := send(w.batch)
	clear(w.batch.Envelopes)
	return err
}

// tpServer serves the Peer service for a Transport.
type tpServer struct {
	agentsilov1.UnimplementedPeerServer
	t *Transport
}

// Stream serves one peer's stream: gRPC calls it on a goroutine per stream.
// It writes the responses; a reader goroutine reads the peer's envelopes,
// starts a goroutine per request and queues one-way messages for a worker
// goroutine that handles them in order.
func (s tpServer) Stream(srv agentsilov1.Peer_StreamServer) error {
	t := s.t
	if !t.enter() {
		return errs.New(codes.Unavailable, "silo %s: transport closed", t.cfg.Self)
	}
	defer t.wg.Done()
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	in := &tpInbound{
		t:      t,
		ctx:    ctx,
		out:    make(chan tpItem, t.cfg.QueueSize),
		oneway: make(chan *Envelope, t.cfg.QueueSize),
		rdone:  make(chan struct{}),
	}
	if err := srv.Send(t.hello()); err != nil {
		return err
	}
	// The reader ends when this handler has returned and gRPC has ended the
	// stream, if not before; Close waits for it.
	t.wg.Add(1)
	go in.read(srv)
	w := tpBatcher{t: t, batch: &agentsilov1.PeerBatch{}}
	for {
		var it tpItem
		if w.carry.env != nil {
			it, w.carry = w.carry, tpItem{}
		} else {
			select {
			case it = <-in.out:
			case <-in.rdone:
				if errors.Is(in.rerr, io.EOF) {
					return nil
				}
				return in.rerr
			case <-ctx.Done():
				if t.ctx.Err() != nil {
					return errs.New(codes.Unavailable, "silo %s: transport closed", t.cfg.Self)
				}
				return ctx.Err()
			}
		}
		w.fill(it, in.out)
		if err := w.flush(srv.Send); err != nil {
			return err
		}
	}
}

// tpInbound is one stream a peer opened to this silo.
type tpInbound struct {
	t      *Transport
	ctx    context.Context // ends with the stream or the transport
	from   string          // the peer's silo name, from its hello
	out    chan tpItem     // responses for the writer
	oneway chan *Envelope  // one-way messages for the worker
	rdone  chan struct{}   // closed when the reader ends
	rerr   error
}

func (in *tpInbound) read(srv agentsilov1.Peer_StreamServer) {
	t := in.t
	defer t.wg.Done()
	defer close(in.rdone)
	first, err := srv.Recv()
	if err != nil {
		in.rerr = err
		return
	}
	if first.GetHello() == nil {
		in.rerr = errs.New(codes.InvalidArgument, "the first batch on a peer stream must carry a hello")
		return
	}
	in.from = first.Hello.Silo
	t.wg.Add(1)
	go in.oneWays()
	b := first
	for {
		for _, e := range b.Envelopes {
			switch e.Kind {
			case agentsilov1.Kind_KIND_REQUEST:
				if in.tryAsync(e) {
					continue
				}
				t.wg.Add(1)
				t.workers.run(t, func() { in.serve(e) })
			case agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT:
				select {
				case in.oneway <- e:
				case <-in.ctx.Done():
					in.rerr = in.ctx.Err()
					return
				}
			default:
				t.logger.Warn("peer sent an envelope of unexpected kind", "peer", in.from, "kind", e.Kind)
			}
		}
		if b, err = srv.Recv(); err != nil {
			in.rerr = err
			return
		}
	}
}

// tpHandlerCtx returns the context of env's handler: it ends at env's
// deadline (shared with the other envelopes due in the same tick, so no timer
// per request) or when the transport closes; without a deadline, it is ctx,
// which also ends with the stream. ok is false if the deadline has passed.
func (t *Transport) tpHandlerCtx(ctx context.Context, env *Envelope) (context.Context, context.CancelFunc, bool) {
	if env.DeadlineUnixMs == 0 {
		return ctx, func() {}, true
	}
	dl := time.UnixMilli(env.DeadlineUnixMs)
	if !time.Now().Before(dl) {
		return ctx, func() {}, false
	}
	return t.deadlines.Context(context.Background(), dl.UnixNano()), func() {}, true
}

// asyncHandler is a TransportHandler that can take some requests without a
// goroutine waiting for each: TryHandleRequest returns false, having done
// nothing, for a request it leaves to HandleRequest; when it returns true,
// reply is called once with the result, and must not be held up for long.
type asyncHandler interface {
	TryHandleRequest(ctx context.Context, from string, env *Envelope, reply func(*agentsilov1.AgentMessage, error)) bool
}

// tryAsync hands env to the handler's TryHandleRequest, if it has one and
// takes it.
func (in *tpInbound) tryAsync(env *Envelope) bool {
	t := in.t
	ah, ok := t.cfg.Handler.(asyncHandler)
	if !ok {
		return false
	}
	ctx, _, ok := t.tpHandlerCtx(in.ctx, env)
	if !ok {
		return false // answered DeadlineExceeded by serve
	}
	t.wg.Add(1)
	taken := ah.TryHandleRequest(ctx, in.from, env, func(msg *agentsilov1.AgentMessage, err error) {
		defer t.wg.Done()
		in.respond(env, msg, err)
	})
	if !taken {
		t.wg.Done()
	}
	return taken
}

// serve handles one request and queues its response.
func (in *tpInbound) serve(env *Envelope) {
	t := in.t
	defer t.wg.Done()
	ctx, cancel, ok := t.tpHandlerCtx(in.ctx, env)
	var msg *agentsilov1.AgentMessage
	var err error
	if ok {
		msg, err = in.handle(ctx, env)
	} else {
		err = errs.New(codes.DeadlineExceeded, "request to %s arrived after its deadline", env.GetMessage().GetTo())
	}
	cancel()
	in.respond(env, msg, err)
}

// respond queues the response to the request env.
func (in *tpInbound) respond(env *Envelope, msg *agentsilov1.AgentMessage, err error) {
	t := in.t
	resp := &Envelope{Kind: agentsilov1.Kind_KIND_RESPONSE, CallId: env.CallId}
	size := 64
	if err == nil && msg != nil {
		if n := proto.Size(msg); n > t.cfg.MaxMessageSize {
			err = errs.New(codes.ResourceExhausted, "reply of %d bytes exceeds the maximum of %d", n, t.cfg.MaxMessageSize)
		} else {
			size += n
		}
	}
	if err != nil {
		code := errs.Code(err)
		if code == codes.Unknown || code == codes.OK {
			code = codes.Internal
		}
		resp.Error = &agentsilov1.Status{Code: int32(code), Message: tpErrMessage(err)}
	} else {
		resp.Message = msg
	}
	select {
	case in.out <- tpItem{env: resp, size: size}:
	case <-in.ctx.Done():
	}
}

// handle calls HandleRequest, turning a panic into Internal.
func (in *tpInbound) handle(ctx context.Context, env *Envelope) (msg *agentsilov1.AgentMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			in.t.logger.Error("peer request handler panicked", "peer", in.from, "to", env.GetMessage().GetTo(), "panic", r)
			msg, err = nil, errs.New(codes.Internal, "request to %s: handler panicked: %v", env.GetMessage().GetTo(), r)
		}
	}()
	return in.t.cfg.Handler.HandleRequest(ctx, in.from, env)
}

// oneWays handles the stream's one-way messages in order.
func (in *tpInbound) oneWays() {
	defer in.t.wg.Done()
	for {
		select {
		case env := <-in.oneway:
			in.oneWay(env)
		case <-in.ctx.Done():
			return
		}
	}
}

func (in *tpInbound) oneWay(env *Envelope) {
	ctx, cancel, ok := in.t.tpHandlerCtx(in.ctx, env)
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
	in.t.cfg.Handler.HandleOneWay(ctx, in.from, env)
}

func errTransportClosed() error { return errs.New(codes.Unavailable, "transport closed") }

// tpErrMessage is err's message, without the "rpc error: code = ..." prefix of
// a gRPC status error.
func tpErrMessage(err error) string { return errs.FromStatus(err).Error() }

// tpCtxErr is the error of an operation cut short by ctx.
func tpCtxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "%s: cancelled", what)
	}
	return errs.New(codes.DeadlineExceeded, "%s: deadline exceeded", what)
}
