package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/retry"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Message is agentsilo's one message type: what a Client sends and gets
// back, what agents push to the session, and what agents exchange among
// themselves (grain.Message is the same type, a plain Go struct): an
// agent's handler and a Client take and return the same *Message (both
// are an Asker), and a reply can be forwarded as it came. The Client
// converts it to and from the wire's form. Set its fields directly; its
// Kind is one of the Kind constants.
type Message = grain.Message

// The errors a Client returns carry gRPC codes. Their vocabulary is
// package errs, agentsilo's one table of errors and codes (see
// docs/errors.md); these are its sentinels under the SDK's names, the same
// values, so that a program that imports client alone can test for them:
// errors.Is(err, client.ErrNotFound) and errors.Is(err, errs.ErrNotFound)
// are the same test (as is status.Code(err) == codes.NotFound).
var (
	// ErrInvalidArgument is errs.ErrInvalidArgument: the call was refused
	// for what it carried (a bad address, typed-skill arguments that do
	// not match the schema); it did not run.
	ErrInvalidArgument = errs.ErrInvalidArgument
	// ErrNotFound is errs.ErrNotFound: an unregistered agent type, or what
	// the call names does not exist.
	ErrNotFound = errs.ErrNotFound
	// ErrPermissionDenied is errs.ErrPermissionDenied: the ACL denies the
	// caller.
	ErrPermissionDenied = errs.ErrPermissionDenied
	// ErrUnauthenticated is errs.ErrUnauthenticated: no or a wrong
	// credential.
	ErrUnauthenticated = errs.ErrUnauthenticated
	// ErrDeadlineExceeded is errs.ErrDeadlineExceeded: the call's deadline
	// passed (its message says whether it may have run).
	ErrDeadlineExceeded = errs.ErrDeadlineExceeded
	// ErrResourceExhausted is errs.ErrResourceExhausted: a message over the
	// size limit, or a limit of the gateway or the agent.
	ErrResourceExhausted = errs.ErrResourceExhausted
	// ErrUnavailable is errs.ErrUnavailable: no gateway, or the call's path
	// broke under way (its message says whether it may have run).
	ErrUnavailable = errs.ErrUnavailable
	// ErrInternal is errs.ErrInternal: the agent panicked, or a bug.
	ErrInternal = errs.ErrInternal
	// ErrAborted is errs.ErrAborted: a conditional write (DeleteState with
	// an etag) found another version.
	ErrAborted = errs.ErrAborted
	// ErrFailedPrecondition is errs.ErrFailedPrecondition: the silo cannot
	// do it as configured (a silo without a state store, say).
	ErrFailedPrecondition = errs.ErrFailedPrecondition
	// ErrAlreadyExists is errs.ErrAlreadyExists: the retry of a keyed call
	// whose first attempt ran and saved its state (grain.ErrApplied); it is
	// not run again.
	ErrAlreadyExists = errs.ErrAlreadyExists
)

// frameOverhead is what the gRPC size limits allow above the message size.
const frameOverhead = 64 << 10

// Client is a session with an agentsilo cluster through one of its gateways.
// The session has an address (Address) that agents send to, to push messages
// to the client (Messages, WithOnMessage). If the session's stream breaks,
// the calls in flight on it fail with Unavailable and the client re-attaches
// through the gateway addresses in turn, from the next one, presenting the
// session's address and resume token: the gateway holding the session
// resumes it; once that gateway's silo has left the cluster, any other
// gateway adopts the session (same address) with the pushes kept for it
// meanwhile, delivered first and in order (a live silo still holding it
// gives it up to the gateway re-attached through). Later calls wait for
// that (bounded by their contexts).
//
// All methods are safe for concurrent use.
type Client struct {
	opts  options
	addrs []string
	conns []*grpc.ClientConn
	msgs  chan *Message
	// takes is set once the program shows it reads msgs: it called
	// Messages, or subscribed the session to topics. Until then a push that
	// finds msgs full is dropped (see Messages).
	takes atomic.Bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // readers and the reconnector

	nextID atomic.Uint64

	// after is time.After; tests see and steer the client's pauses with it.
	after func(time.Duration) <-chan time.Time

	mu        sync.Mutex
	cur       *stream       // nil while re-attaching
	ready     chan struct{} // closed when a re-attach round ends
	lastErr   error         // why the last re-attach round failed
	address   string
	token     string
	principal string
	closed    bool
	flaps     int // streams in a row that broke before delivering a frame

	pubOnce sync.Once
	pub     string // see publisher

	sessSubs sessionSubs // topics.go: the session's subscriptions
}

// DefaultPort is the gateway port of an address given without one.
const DefaultPort = protocol.DefaultGatewayPort

// Dial opens a session on the first reachable gateway of addrs: host:port,
// or a host or IP address alone (`gw.example.com`, `10.0.0.5`, `[::1]`,
// `::1`) for DefaultPort. ctx bounds the dial, not the Client's life; Close
// ends it.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errs.New(codes.InvalidArgument, "client: no gateway address")
	}
	c := &Client{opts: defaultOptions(), addrs: make([]string, len(addrs)), after: time.After}
	for i, a := range addrs {
		var err error
		if c.addrs[i], err = gatewayTarget(a); err != nil {
			return nil, err
		}
	}
	for _, o := range opts {
		o.apply(&c.opts)
	}
	// gRPC refuses metadata values other than printable ASCII (with
	// Internal, at every call); say so once, here.
	if !printableASCII(c.opts.principal) {
		return nil, errs.New(codes.InvalidArgument, "client: principal %q: want printable ASCII", c.opts.principal)
	}
	if !printableASCII(c.opts.apiKey) {
		return nil, errs.New(codes.InvalidArgument, "client: API key: want printable ASCII")
	}
	if c.opts.timeout <= 0 {
		return nil, errs.New(codes.InvalidArgument, "client: timeout %v must be positive", c.opts.timeout)
	}
	if c.opts.maxSize < 1024 {
		return nil, errs.New(codes.InvalidArgument, "client: max message size %d must be at least 1024", c.opts.maxSize)
	}
	creds := insecure.NewCredentials()
	if c.opts.tls != nil {
		creds = credentials.NewTLS(c.opts.tls)
	}
	limit := c.opts.maxSize + frameOverhead
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// A gateway that comes back is dialled again within 5 s, as the
		// session's re-attach rounds are paced: gRPC's default backoff grows
		// to 2 minutes, which a call waiting for a gateway would wait out.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithChainUnaryInterceptor(checkRequest),
	}, c.opts.dialOpts...)
	if c.opts.tokens != nil {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(tokenCreds{c.opts.tokens}))
	}
	for _, a := range c.addrs {
		conn, err := grpc.NewClient(a, dialOpts...)
		if err != nil {
			c.closeConns()
			return nil, errs.New(codes.InvalidArgument, "client: gateway %q: %w", a, err)
		}
		c.conns = append(c.conns, conn)
	}
	c.msgs = make(chan *Message, 256)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var err error
	for i := range c.addrs {
		var st *stream
		var w *agentsilov1.Welcome
		if st, w, err = c.open(ctx, i, &agentsilov1.Hello{Principal: c.opts.principal}); err == nil {
			c.attached(st, w)
			return c, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	c.cancel()
	c.closeConns()
	return nil, err
}

// gatewayTarget returns addr as a gRPC target: host:port as it is, a host
// or IP address alone with DefaultPort. A target with a scheme
// (`dns:///host:port`, `unix:///path`) is left to gRPC.
func gatewayTarget(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	switch {
	case addr == "":
		return "", errs.New(codes.InvalidArgument, "client: empty gateway address")
	case strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:"):
		return addr, nil
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		return net.JoinHostPort(ip.String(), DefaultPort), nil // 10.0.0.5, ::1
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// No port (`gw.example.com`, `[::1]`), or not an address at all.
		host = addr
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
		if strings.ContainsAny(host, "[]/ ") || (strings.Contains(host, ":") && !isIP(host)) {
			return "", errs.New(codes.InvalidArgument, "client: gateway address %q: want host:port, or a host alone for port %s", addr, DefaultPort)
		}
		return net.JoinHostPort(host, DefaultPort), nil
	}
	if port == "" {
		port = DefaultPort // "host:"
	}
	return net.JoinHostPort(host, port), nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// printableASCII reports whether s can be a gRPC metadata value.
func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// call runs m (its kind set) as a Call on the session and waits for its
// Result. A message that cannot be sent as it is (too large, a string not
// UTF-8) fails at once, and nothing is sent. A message with an idempotency
// key that fails with Unavailable is sent again until ctx ends.
func (c *Client) call(ctx context.Context, m *agentsilov1.AgentMessage) (*Message, error) {
	if n := proto.Size(m); n > c.opts.maxSize {
		return nil, errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d: not sent, so it did not run", n, c.opts.maxSize)
	}
	if err := checkUTF8(m); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	var b *retry.Backoff
	var refused error // the last refusal before any agent ran it
	for {
		r, again, err := c.callOnce(ctx, m)
		if again && err != nil {
			// The gateway's silo refused it before any agent ran it
			// (fenced, suspended, shutting down): sent again after a
			// pause, by then on the stream the session re-attached to if
			// that silo went away.
			refused = err
			if b == nil {
				b = retry.Resend.New(nil)
			}
			if !b.Wait(ctx, nil) {
				return nil, errs.Wrap(errs.Code(ctx.Err()), ctx.Err(), "call %s: refused before it ran, until the deadline: %w", m.GetTo(), err)
			}
			continue
		}
		if err != nil && refused != nil && ctx.Err() != nil {
			// The deadline came while it was sent again: that last try
			// may have run, the ones before it were refused.
			return nil, errs.Wrap(errs.Code(err), err, "call %s: refused before it ran (%w), then sent again, which may have run", m.GetTo(), refused)
		}
		if err != nil && m.GetIdempotencyKey() != "" && errs.Code(err) == codes.Unavailable && ctx.Err() == nil {
			// Its gateway went away: whether the call ran is unknown, and
			// its idempotency key makes sending it again safe.
			if b == nil {
				b = retry.Resend.New(nil)
			}
			if b.Wait(ctx, nil) {
				continue
			}
		}
		if !again || err != nil {
			return r, err
		}
		// The call did not go out, or the gateway drained before starting
		// it: send it again, on the stream the session re-attaches to.
	}
}

// resend is the result a call gets when the gateway it was sent to drained
// without starting it.
var resend = &agentsilov1.Result{}

// callOnce sends m on the current stream and waits for its result; again
// says the call was not started and must be sent again (with an error: the
// gateway refused it before any agent ran it, see Result.not_run).
func (c *Client) callOnce(ctx context.Context, m *agentsilov1.AgentMessage) (_ *Message, again bool, _ error) {
	st, err := c.stream(ctx)
	if err != nil {
		return nil, false, errs.Wrap(errs.Code(err), err, "call %s: not sent, so it did not run", m.GetTo())
	}
	id := c.nextID.Add(1)
	ch := make(chan *agentsilov1.Result, 1)
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		// Never sent: send it on the re-attached stream, once broken has
		// let go of this one.
		return nil, true, st.waitDone(ctx, m)
	}
	st.calls[id] = ch
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.calls, id)
		st.mu.Unlock()
	}()

	call := &agentsilov1.Call{CallId: id, Message: m}
	if d, ok := ctx.Deadline(); ok {
		call.TimeoutMs = max(time.Until(d).Milliseconds(), 1)
	}
	if err := st.send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Call{Call: call}}); err != nil {
		if !errors.Is(err, io.EOF) {
			// gRPC refused the frame itself (and ended the stream with
			// that): sent again, it would fail again.
			return nil, false, wrap(err, "call "+m.GetTo())
		}
		// The stream broke before the call went out (its reader will
		// have the reason): send it again once the session re-attached.
		return nil, true, st.waitDone(ctx, m)
	}
	select {
	case r := <-ch:
		if r == resend {
			return nil, true, nil
		}
		if e := r.GetError(); e != nil {
			return nil, r.GetNotRun(), errs.New(codes.Code(e.GetCode()), "%s", e.GetMessage())
		}
		if r.GetMessage() == nil {
			return &Message{}, false, nil
		}
		return grain.MessageFromProto(r.GetMessage()), false, nil
	case <-ctx.Done():
		// Tell the gateway to stop; if the stream is gone, so is the call.
		_ = st.send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Cancel{Cancel: &agentsilov1.Cancel{CallId: id}}})
		return nil, false, callCtxErr(ctx, m.GetTo(), true)
	}
}

// prepare returns msg's wire form (the caller's msg is left alone),
// addressed to to.
func prepare(to string, msg *Message, kind agentsilov1.Kind) *agentsilov1.AgentMessage {
	m := &agentsilov1.AgentMessage{}
	if msg != nil {
		m = grain.MessageToProto(msg)
	}
	m.To, m.Kind = to, kind
	return m
}

// Ask sends msg to the agent at to (`Type:owner:alias`, or `Type:alias` for
// an agent of the client's own principal) as a REQUEST and returns the reply.
// Without a deadline on ctx, it waits at most the client's timeout (30 s by
// default). msg is not modified; From is set by the gateway.
//
// With msg.IdempotencyKey set, Ask, Send and Event are sent again when they
// fail with Unavailable (the gateway went away mid-call), until ctx ends:
// the silo hosting the agent hands a key to it once within its window (10
// minutes; while the agent stays on that silo), and answers a repeated Ask
// with the first reply.
func (c *Client) Ask(ctx context.Context, to string, msg *Message) (_ *Message, err error) {
	m := prepare(to, msg, agentsilov1.Kind_KIND_REQUEST)
	ctx, span := c.startSpan(ctx, "agentsilo Ask", m)
	defer func() { endSpan(span, err) }()
	return c.call(ctx, m)
}

// Send delivers msg to the agent at to as a ONE_WAY message. It returns once
// the agent's mailbox has taken it.
func (c *Client) Send(ctx context.Context, to string, msg *Message) error {
	m := prepare(to, msg, agentsilov1.Kind_KIND_ONE_WAY)
	ctx, span := c.startSpan(ctx, "agentsilo Send", m)
	_, err := c.call(ctx, m)
	endSpan(span, err)
	return err
}

// Event delivers msg to the agent at to as an EVENT, handled by its OnEvent.
func (c *Client) Event(ctx context.Context, to string, msg *Message) error {
	m := prepare(to, msg, agentsilov1.Kind_KIND_EVENT)
	ctx, span := c.startSpan(ctx, "agentsilo Event", m)
	_, err := c.call(ctx, m)
	endSpan(span, err)
	return err
}

// Messages returns the messages that agents push to the session, in order
// (unless WithOnMessage is set, which takes them instead). Once it has been
// called, read it: while its buffer (256 messages) is full the session
// reads nothing else, replies included. Until it is first called (and
// unless the session subscribes to topics, SubscribeSession), pushes that
// find the buffer full are dropped instead: a program that only asks does
// not read them, and its replies must not wait behind them (a model agent
// of package llm, say, pushes its progress to the session it answers,
// some lines a turn). It is closed by Close.
func (c *Client) Messages() <-chan *Message {
	c.takes.Store(true)
	return c.msgs
}

// Address returns the session's address, `Session:<principal>:<id>`, which
// agents send to, to push messages to the client. It survives the loss of
// its gateway's silo (another gateway adopts the session); it changes only
// if the session had to be re-opened because no silo kept it (it expired,
// or its gateway's silo and its fallback holder were both lost).
func (c *Client) Address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.address
}

// Principal returns the identity the gateway granted the session.
func (c *Client) Principal() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.principal
}

// unary prepares a unary call to the session's current gateway.
func (c *Client) unary(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.GatewayClient) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
	}
	return c.metadata(ctx), cancel, agentsilov1.NewGatewayClient(c.conns[c.connIndex()])
}

// connIndex is the index of the session's current gateway.
func (c *Client) connIndex() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur.idx
	}
	return 0
}

// metadata adds the principal and API key to ctx's outgoing metadata.
func (c *Client) metadata(ctx context.Context) context.Context {
	var kv []string
	if c.opts.principal != "" {
		kv = append(kv, protocol.PrincipalHeader, c.opts.principal)
	}
	if c.opts.apiKey != "" {
		kv = append(kv, protocol.APIKeyHeader, c.opts.apiKey)
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Close ends the session: calls in flight fail with Unavailable, Messages is
// closed, and the connections are closed. The gateway keeps the session's
// pushes for a while, but this Client cannot resume it.
func (c *Client) Close() error {
	c.endSessionSubs() // topics.go: the session's subscriptions end with it
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.ready != nil {
		close(c.ready)
		c.ready = nil
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	close(c.msgs)
	return c.closeConns()
}

func (c *Client) closeConns() error {
	var errList []error
	for _, conn := range c.conns {
		if err := conn.Close(); err != nil {
			errList = append(errList, err)
		}
	}
	return errors.Join(errList...)
}

// wrap turns a gRPC error into an errs error, its message prefixed with what.
func wrap(err error, what string) error {
	if errors.Is(err, io.EOF) {
		err = errs.New(codes.Unavailable, "stream closed")
	}
	err = errs.FromStatus(err)
	if what == "" {
		return err
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return errs.New(e.Code(), "%s: %s", what, e.Message())
	}
	return fmt.Errorf("%s: %w", what, err)
}

// callCtxErr is the error of a call to "to" whose ctx ended: after it was
// sent (it may have run) or before (it did not).
func callCtxErr(ctx context.Context, to string, sent bool) error {
	how := "before it was sent, so it did not run"
	if sent {
		how = "after it was sent: it may have run"
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "call %s: cancelled %s", to, how)
	}
	return errs.New(codes.DeadlineExceeded, "call %s: deadline exceeded %s", to, how)
}

func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.New(codes.Canceled, "%s: cancelled", what)
	}
	return errs.New(codes.DeadlineExceeded, "%s: deadline exceeded", what)
}
