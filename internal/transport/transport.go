package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/certs"
	"github.com/agentsilo/agentsilo/internal/deadline"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Envelope is one silo-to-silo message: an AgentMessage with its routing
// fields (kind, call id, view version, hops, deadline, error).
type Envelope = agentsilov1.PeerEnvelope

// Handler is what a silo does with the envelopes its peers send it.
// The transport calls it from the goroutines of its inbound streams; from is
// the sending silo's name, as its stream's hello declared it.
type Handler interface {
	// HandleRequest handles a REQUEST and returns the reply (or an error,
	// whose errs code travels back to the caller; an error without a code
	// becomes Internal, and so does a panic). Each request runs on a
	// goroutine of its own, concurrently with every other request and
	// one-way message, so a slow handler never holds up the stream; a
	// Handler that is also an OrderedHandler gets requests there instead,
	// in order with one-way messages. ctx ends with DeadlineExceeded
	// at the request's deadline (env.DeadlineUnixMs), and with Canceled
	// when the caller's context is cancelled (the peer sends a cancel
	// notice), when the transport closes, and, for a request without a
	// deadline, when the stream from the peer breaks; a handler must return
	// soon after ctx ends, as Close waits for it.
	HandleRequest(ctx context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error)
	// HandleOneWay handles a ONE_WAY message or an EVENT. The envelopes of
	// one inbound stream (that is, from one peer) go to one of the stream's
	// lanes by their receiver's address, and each lane's are handled one at
	// a time, in the order the peer sent them, on one goroutine per lane
	// (started when the lane gets an envelope, ended once it has handed on
	// all it had: an idle peer costs no lane goroutines), concurrently with
	// the other lanes and other peers' streams. It should
	// only hand the message on (a mailbox post, which may wait briefly for
	// room): while it runs, the lane's next envelopes queue, and once that
	// queue is full the peer's whole stream waits. ctx
	// ends at the envelope's deadline if it has one, when the stream breaks,
	// or when the transport closes.
	HandleOneWay(ctx context.Context, from string, env *Envelope)
}

// Config configures a Transport. Zero fields get the defaults named
// on them.
type Config struct {
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
	// queued on one inbound stream). A full queue makes the sender wait,
	// bounded by its context. Default: 10000.
	QueueSize int
	// MaxBatch bounds the envelopes sent in one stream message. Default: 256;
	// at most MaxReceivedBatch, what a silo accepts in one.
	MaxBatch int
	// IdleTimeout closes the stream to a peer, and its connection, once
	// nothing was sent on it for that long (checked every IdleTimeout, so
	// it closes between one and two of them after its last envelope), with
	// nothing queued and no reply awaited: an idle peer then costs one
	// goroutine here and none on the peer. The next Ask or Send opens it
	// again (while it opens, envelopes queue). Default: 1 minute; negative:
	// never.
	IdleTimeout time.Duration
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
	// TLS, if set, secures the streams with mutual TLS: both ends present a
	// certificate of its CA, and each end's certificate must name the silo
	// its hello names (as a DNS name or common name), or TLSName if that is
	// set. Without it the streams are plaintext and unauthenticated.
	TLS *certs.Reloader
	// TLSName, with TLS, is a name every silo's certificate may carry
	// instead of its own (one certificate shared by the silos of a cluster).
	TLSName string
	// OnPeerState, if set, is called when the stream to a peer comes up
	// (up) or breaks (!up), on the peer's sender goroutine: it must not
	// block. The silo tells its membership of broken streams through it.
	OnPeerState func(peerAddr string, up bool)
}

// Stats counts the stream messages a transport has handed to gRPC
// (on its own streams, and the responses on the streams it accepted).
type Stats struct {
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
// An Ask that is the only one in flight to its peer, finding nothing queued
// and no write under way, is written by its own goroutine instead (and so is
// the only reply in flight on an inbound stream): with nothing to batch it
// with, a hand-off to the sender would only add a goroutine wake-up.
// A slow or dead peer fills only its own queue. When a peer's stream breaks,
// its pending Asks fail at once with Unavailable, those never written to the
// stream marked ErrNotDelivered (the caller may send them again: the peer
// never saw them) and the others saying that they may have run, and
// the transport reopens the stream in the background, waiting 50 ms, then
// twice as long after each failed attempt, up to MaxBackoff. While it waits,
// Asks (ErrNotDelivered) and Sends to that peer fail at once with
// Unavailable; while an attempt
// is under way (at most ConnectTimeout), they queue. The transport keeps
// retrying a peer until ClosePeer: the silo calls it when the peer leaves the
// view. A stream that carried nothing for IdleTimeout, with no reply
// awaited, is closed with its connection (the peer hands on what it was
// sent before its side ends; this is not a break, and OnPeerState is not
// told); the next Ask or Send opens it again. The queues hold what is
// queued, not their bound: they grow on demand up to QueueSize and let a
// burst's buffer go once drained, so an idle peer costs one goroutine and
// a few KB here and nothing on the peer.
//
// Errors carry errs codes. All methods are safe for concurrent use.
type Transport struct {
	cfg    Config
	logger *slog.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	view   atomic.Int64
	dial   []grpc.DialOption
	limit  int // gRPC message size limit

	mu     sync.RWMutex
	peers  map[string]*peer
	closed bool
	wg     sync.WaitGroup // every goroutine the transport starts

	batches, envelopes, maxBatch atomic.Uint64

	workers   workers        // reused goroutines for inbound requests
	deadlines deadline.Slots // the deadlines of inbound envelopes

	// Test hooks, set before any traffic: called by a sender before it
	// fills a batch and after an envelope is queued.
	hookBeforeSend func(addr string)
	hookEnqueued   func(addr string)
}

// New returns a transport; it starts no goroutine until it is used
// or serves a stream.
func New(cfg Config) (*Transport, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = protocol.DefaultMaxMessageSize
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
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Minute
	}
	switch {
	case cfg.MaxMessageSize < 1024:
		return nil, errs.New(codes.InvalidArgument, "transport: MaxMessageSize %d must be at least 1024", cfg.MaxMessageSize)
	case cfg.QueueSize < 1:
		return nil, errs.New(codes.InvalidArgument, "transport: QueueSize %d must be at least 1", cfg.QueueSize)
	case cfg.MaxBatch < 1 || cfg.MaxBatch > MaxReceivedBatch:
		return nil, errs.New(codes.InvalidArgument, "transport: MaxBatch %d must be from 1 to %d", cfg.MaxBatch, MaxReceivedBatch)
	case cfg.ConnectTimeout < 0 || cfg.MaxBackoff < 0:
		return nil, errs.New(codes.InvalidArgument, "transport: ConnectTimeout and MaxBackoff must not be negative")
	}
	t := &Transport{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "transport", "silo", cfg.Self),
		peers:  make(map[string]*peer),
		limit:  cfg.MaxMessageSize + protocol.FrameOverhead,
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.ClientConfig())
	}
	t.dial = append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(t.limit), grpc.MaxCallSendMsgSize(t.limit), grpc.ForceCodecV2(peerCodec{})),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.MaxBackoff},
			MinConnectTimeout: cfg.ConnectTimeout,
		}),
		// Fixed flow-control windows: gRPC's dynamic window (BDP
		// estimation) pings the peer on every message while the stream
		// is quiet, which at one Ask in flight doubles the frames written
		// and read. See peerWindow.
		grpc.WithInitialWindowSize(peerWindow),
		grpc.WithInitialConnWindowSize(peerWindow),
		// Notice a peer that vanished without closing its connections.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}, cfg.DialOptions...)
	return t, nil
}

const minBackoff = 50 * time.Millisecond

// peerWindow is the flow-control window of a peer stream and its
// connection (there is one stream per connection): what a peer may have
// sent that this silo's reader has not taken yet, so it bounds the memory a
// peer's stream holds here, besides the lanes and the queues. 4 MiB: a batch
// of MaxMessageSize fits, and gRPC does not cap the window at 64 KiB as its
// default does before its estimate grows it.
const peerWindow = 4 << 20

// ServerOptions returns the gRPC server options the server that Register
// serves the Peer service on needs: message size limits matching
// MaxMessageSize, and a keepalive policy that accepts the transport's pings
// (gRPC's default policy would end idle peer streams).
func (t *Transport) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(t.limit),
		grpc.MaxSendMsgSize(t.limit),
		grpc.ForceServerCodecV2(peerCodec{}), // protobuf on the wire; see peerCodec
		grpc.InitialWindowSize(peerWindow),
		grpc.InitialConnWindowSize(peerWindow),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if t.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(t.cfg.TLS.ServerConfig())))
	}
	return opts
}

// checkPeer checks, with TLS on, that the certificate of the other end of
// the stream of ctx names silo, the name its hello gave (or Config.TLSName).
func (t *Transport) checkPeer(ctx context.Context, silo string) error {
	if t.cfg.TLS == nil {
		return nil
	}
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return errs.New(codes.Unauthenticated, "peer %q: no peer information", protocol.Clip(silo))
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return errs.New(codes.Unauthenticated, "peer %q at %s: no TLS certificate", protocol.Clip(silo), p.Addr)
	}
	cert := info.State.PeerCertificates[0]
	if certs.NameOK(cert, silo) || (t.cfg.TLSName != "" && certs.NameOK(cert, t.cfg.TLSName)) {
		return nil
	}
	return errs.New(codes.Unauthenticated, "peer at %s says it is silo %q, but its certificate names %v", p.Addr, protocol.Clip(silo), certs.Names(cert))
}

// Register serves the Peer service on s, the silo's peer server, which
// should be made with ServerOptions: what peers send arrives at h. Call it
// before s serves.
func (t *Transport) Register(s *grpc.Server, h Handler) {
	agentsilov1.RegisterPeerServer(s, server{t: t, h: h})
}

// SetViewVersion sets the membership view version sent in the hellos of the
// streams opened or accepted from now on.
func (t *Transport) SetViewVersion(v int64) { t.view.Store(v) }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{Batches: t.batches.Load(), Envelopes: t.envelopes.Load(), MaxBatch: t.maxBatch.Load()}
}

// Ask sends env's message as a REQUEST to the peer at peerAddr (its peer
// listener's host:port) and waits for the reply. env.Message is required;
// env.ViewVersion and env.Hops travel as set; Ask sets Kind, CallId and, from
// ctx's deadline, DeadlineUnixMs (keeping an earlier one already set). env
// belongs to the transport from the call on.
//
// If ctx is cancelled (not at its deadline, which the peer knows) after the
// request may have been written, a cancel notice follows it on the stream
// and the handler's context on the peer is cancelled; a notice that finds
// the queue full or the stream broken is dropped, leaving the handler to
// its deadline.
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
	p.asking.Add(1)
	defer p.asking.Add(-1)
	c := newCall()
	env.CallId = p.nextID.Add(1)
	if err := p.register(env.CallId, c); err != nil {
		return nil, err
	}
	if err := p.enqueue(ctx, item{env: env, size: size, call: c}); err != nil {
		if !p.forget(env.CallId) {
			r := <-c.done // failed meanwhile: prefer that answer
			return r.msg, r.err
		}
		return nil, err
	}
	select {
	case r := <-c.done:
		c.release()
		return r.msg, r.err
	case <-ctx.Done():
		if !p.forget(env.CallId) {
			r := <-c.done
			return r.msg, r.err
		}
		// A request still queued never will be sent (the sender skips
		// it): it did not run. One that may have been written may have,
		// and a cancelled one is cancelled on the peer too.
		unsent := c.fate.CompareAndSwap(callQueued, callUnsent)
		if !unsent && errors.Is(ctx.Err(), context.Canceled) {
			p.sendCancel(env.CallId)
		}
		return nil, askCtxErr(ctx, peerAddr, !unsent)
	}
}

// askCtxErr is the error of an Ask to peerAddr cut short by ctx, after its
// request was written (it may have run) or before (it did not).
func askCtxErr(ctx context.Context, peerAddr string, written bool) error {
	how := "before it was sent (it did not run)"
	if written {
		how = "after it was sent: it may have run"
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "ask peer %s: cancelled %s", peerAddr, how)
	}
	return errs.New(codes.DeadlineExceeded, "ask peer %s: deadline exceeded %s", peerAddr, how)
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
	return p.enqueue(ctx, item{env: env, size: size})
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

// Retire is ClosePeer for a peer that left the view: the transport forgets
// it at once (a later call to its address dials anew) and refuses it new
// calls, but the calls it is already answering keep their stream until
// their results arrive (a silo that leaves gracefully finishes its turns);
// then its stream closes and its goroutines end. It does not wait.
func (t *Transport) Retire(peerAddr string) {
	t.mu.Lock()
	p := t.peers[peerAddr]
	delete(t.peers, peerAddr)
	t.mu.Unlock()
	if p != nil {
		p.retire()
	}
}

// Peers returns the addresses of the peers the transport keeps a stream to,
// or retries one to, until ClosePeer: the silo closes those that are no
// longer in its view.
func (t *Transport) Peers() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	addrs := make([]string, 0, len(t.peers))
	for addr := range t.peers {
		addrs = append(addrs, addr)
	}
	return addrs
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
	down := p.state == stateDown
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

// check validates env (a message of at most MaxMessageSize that encodes)
// and returns its message's size.
func (t *Transport) check(ctx context.Context, env *Envelope) (int, error) {
	if env == nil || env.Message == nil {
		return 0, errs.New(codes.InvalidArgument, "envelope without a message")
	}
	size := messageSize(env.Message)
	if size > t.cfg.MaxMessageSize {
		return 0, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d: not sent, so it did not run", size, t.cfg.MaxMessageSize)
	}
	// Checked here, alone: a message that does not encode would fail the
	// whole batch it joined, and break the stream.
	if err := protocol.CheckMessage(env.Message); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		if ms := dl.UnixMilli(); env.DeadlineUnixMs == 0 || ms < env.DeadlineUnixMs {
			env.DeadlineUnixMs = ms
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(ctx, "send to peer: before it was sent, so it did not run")
	}
	return size + 32, nil // room for the envelope's own fields
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

// ErrNotDelivered is matched (errors.Is) by the errors of Asks that were
// certainly not delivered: the peer's stream broke, or was down, before the
// request was written to it, or the peer's handler refused it before running
// it (its error has a method NotRun that returns true; the reply carries
// not_run). Such an Ask may be sent again, to this peer or another, without
// running twice. Its code is Unavailable, or the refusal's.
var ErrNotDelivered = errors.New("not delivered")

// notDelivered marks err as ErrNotDelivered, keeping its code.
type notDelivered struct{ err error }

func (e notDelivered) Error() string        { return e.err.Error() + " (the request was not delivered)" }
func (e notDelivered) Unwrap() error        { return e.err }
func (e notDelivered) Is(target error) bool { return target == ErrNotDelivered }

func errTransportClosed() error { return errs.New(codes.Unavailable, "transport closed") }

// notSent is err, the reason a request queued to a peer was never written
// to its stream, saying so.
func notSent(err error) error {
	return errs.Wrap(errs.Code(err), err, "not sent, so it did not run")
}

// errMessage is err's message, without the "rpc error: code = ..." prefix of
// a gRPC status error.
func errMessage(err error) string { return errs.FromStatus(err).Error() }

// ctxErr is the error of an operation cut short by ctx.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "%s: cancelled", what)
	}
	return errs.New(codes.DeadlineExceeded, "%s: deadline exceeded", what)
}
