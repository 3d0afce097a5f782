package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/deadline"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// testHandler is a Handler made of functions; a nil request echoes
// "echo:<text>" with the handling silo and the sender in state.
type testHandler struct {
	self    string
	request func(ctx context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error)
	oneway  func(ctx context.Context, from string, env *Envelope)
	serve   Handler // if not nil, what the silo serves instead (see orderedAsync)
}

func (h *testHandler) HandleRequest(ctx context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error) {
	if h.request != nil {
		return h.request(ctx, from, env)
	}
	r := env.Message.Response()
	r.Message = "echo:" + env.Message.Message
	r.State = map[string]string{"silo": h.self, "from": from}
	return r, nil
}

func (h *testHandler) HandleOneWay(ctx context.Context, from string, env *Envelope) {
	if h.oneway != nil {
		h.oneway(ctx, from, env)
	}
}

type testSilo struct {
	name string
	addr string
	tr   *Transport
	stop func() // stops the gRPC server (cutting connections), then the transport
}

// startSilo starts a transport named name serving on listen (host:port,
// port 0 for any). configure, if not nil, adjusts the config; hooks, if not
// nil, sets test hooks before any traffic.
func startSilo(tb testing.TB, name, listen string, h *testHandler, configure func(*Config), hooks func(*Transport)) *testSilo {
	tb.Helper()
	if h == nil {
		h = &testHandler{}
	}
	h.self = name
	cfg := Config{Self: name, Logger: slog.New(slog.DiscardHandler)}
	if configure != nil {
		configure(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if hooks != nil {
		hooks(tr)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(tr.ServerOptions()...)
	if h.serve != nil {
		tr.Register(srv, h.serve)
	} else {
		tr.Register(srv, h)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	var once sync.Once
	s := &testSilo{name: name, addr: lis.Addr().String(), tr: tr}
	s.stop = func() {
		once.Do(func() {
			srv.Stop()
			<-served
			tr.Close()
		})
	}
	tb.Cleanup(s.stop)
	return s
}

func checkLeaks(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
}

func requestEnv(text string) *Envelope {
	return &Envelope{Message: &agentsilov1.AgentMessage{To: "Echo:acme:x", From: "Caller:acme:y", Message: text, Id: text}}
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := errs.Code(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
}

func TestTransportRoundTrip(t *testing.T) {
	checkLeaks(t)
	type got struct {
		from string
		env  *Envelope
	}
	oneways := make(chan got, 200)
	seen := make(chan got, 1)
	hb := &testHandler{oneway: func(_ context.Context, from string, env *Envelope) { oneways <- got{from, env} }}
	hb.request = func(_ context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		seen <- got{from, env}
		r := env.Message.Response()
		r.Message = "echo:" + env.Message.Message
		return r, nil
	}
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	ctx := context.Background()

	env := requestEnv("hi")
	env.ViewVersion, env.Hops = 7, 2
	r, err := a.tr.Ask(ctx, b.addr, env)
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "echo:hi" || r.CorrelationId != "hi" || r.Kind != agentsilov1.Kind_KIND_RESPONSE {
		t.Fatalf("reply %v", r)
	}
	g := <-seen
	if g.from != "a" || g.env.ViewVersion != 7 || g.env.Hops != 2 || g.env.Kind != agentsilov1.Kind_KIND_REQUEST || g.env.DeadlineUnixMs != 0 {
		t.Fatalf("handler saw from %q, %v", g.from, g.env)
	}

	// The other way round: b dials a stream of its own.
	r, err = b.tr.Ask(ctx, a.addr, requestEnv("back"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "echo:back" || r.State["silo"] != "a" || r.State["from"] != "b" {
		t.Fatalf("reply %v", r)
	}

	// One-way messages and events arrive in order.
	const n = 100
	for i := range n {
		env := requestEnv(fmt.Sprint(i))
		if i%3 == 0 {
			env.Kind = agentsilov1.Kind_KIND_EVENT
		}
		if err := a.tr.Send(ctx, b.addr, env); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		g := <-oneways
		want := agentsilov1.Kind_KIND_ONE_WAY
		if i%3 == 0 {
			want = agentsilov1.Kind_KIND_EVENT
		}
		if g.from != "a" || g.env.Message.Message != fmt.Sprint(i) || g.env.Kind != want {
			t.Fatalf("one-way %d: from %q, %v", i, g.from, g.env)
		}
	}
	if s := a.tr.Stats(); s.Envelopes < n+1 || s.Batches == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// gate holds a sender before it fills its batch until opened, and counts
// what is queued for one peer, so that tests can fill a queue exactly.
type gate struct {
	peer    string
	entered chan struct{}
	open    chan struct{}
	queued  chan struct{}
	once    sync.Once
}

func newTpGate() *gate {
	return &gate{entered: make(chan struct{}, 1), open: make(chan struct{}), queued: make(chan struct{}, 1000)}
}

// release opens the gate; it is safe to call more than once. Tests also
// call it from a cleanup, so that a failed test does not leave a sender
// stuck behind the gate (and Close waiting for it).
func (g *gate) release() {
	g.once.Do(func() { close(g.open) })
}

func (g *gate) install(tr *Transport) {
	tr.hookBeforeSend = func(addr string) {
		if addr == g.peer {
			select {
			case g.entered <- struct{}{}:
			default:
			}
			<-g.open
		}
	}
	tr.hookEnqueued = func(addr string) {
		if addr == g.peer {
			g.queued <- struct{}{}
		}
	}
}

func TestTransportBatching(t *testing.T) {
	checkLeaks(t)
	b := startSilo(t, "b", "127.0.0.2:0", nil, nil, nil)
	g := newTpGate()
	g.peer = b.addr
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, g.install)
	t.Cleanup(g.release)

	const n = 50
	errc := make(chan error, n)
	ask := func(i int) {
		r, err := a.tr.Ask(context.Background(), b.addr, requestEnv(fmt.Sprint(i)))
		if err == nil && r.Message != fmt.Sprint("echo:", i) {
			err = fmt.Errorf("ask %d: reply %q", i, r.Message)
		}
		errc <- err
	}
	go ask(0)
	<-g.entered // the sender holds ask 0
	<-g.queued
	for i := 1; i < n; i++ {
		go ask(i)
	}
	for i := 1; i < n; i++ {
		<-g.queued
	}
	g.release()
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// Ask 0 was held either by the sender (it found the stream not open
	// yet, and queued) or in its own direct write (the stream was up):
	// then it goes out alone, and the 49 queued behind it in one batch.
	if s := a.tr.Stats(); s.Envelopes != n || s.Batches > 2 || s.MaxBatch < n-1 {
		t.Fatalf("stats %+v, want %d envelopes in one batch, or one and then %d", s, n, n-1)
	}
}

func TestTransportBackpressure(t *testing.T) {
	checkLeaks(t)
	b := startSilo(t, "b", "127.0.0.2:0", nil, nil, nil)
	c := startSilo(t, "c", "127.0.0.3:0", nil, nil, nil)
	g := newTpGate()
	g.peer = b.addr
	a := startSilo(t, "a", "127.0.0.1:0", nil, func(c *Config) { c.QueueSize = 2 }, g.install)
	t.Cleanup(g.release)

	errc := make(chan error, 3)
	ask := func() {
		_, err := a.tr.Ask(context.Background(), b.addr, requestEnv("q"))
		errc <- err
	}
	go ask()
	<-g.entered
	<-g.queued
	go ask()
	go ask()
	<-g.queued
	<-g.queued
	// b's queue is full: a caller waits as long as its ctx lets it...
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := a.tr.Ask(ctx, b.addr, requestEnv("late"))
	cancel()
	wantCode(t, err, codes.DeadlineExceeded)
	// ...and one whose ctx never ends is refused at once.
	wantCode(t, a.tr.Send(context.Background(), b.addr, requestEnv("late")), codes.ResourceExhausted)
	// Other peers are not held up.
	if r, err := a.tr.Ask(context.Background(), c.addr, requestEnv("c")); err != nil || r.Message != "echo:c" {
		t.Fatalf("ask c: %v, %v", r, err)
	}
	g.release()
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestTransportErrors(t *testing.T) {
	checkLeaks(t)
	hb := &testHandler{request: func(_ context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		switch env.Message.Message {
		case "notfound":
			return nil, errs.New(codes.NotFound, "agent type %q is not registered", "Nope")
		case "denied":
			return nil, fmt.Errorf("wrapped: %w", errs.New(codes.PermissionDenied, "no"))
		case "plain":
			return nil, errors.New("boom")
		case "panic":
			panic("kaboom")
		case "big":
			return &agentsilov1.AgentMessage{Data: make([]byte, 4096)}, nil
		case "nil":
			return nil, nil
		case "notrun":
			return nil, notRunErr{errs.New(codes.Unavailable, "silo is shutting down")}
		}
		return env.Message.Response(), nil
	}}
	small := func(c *Config) { c.MaxMessageSize = 2048 }
	a := startSilo(t, "a", "127.0.0.1:0", nil, small, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, small, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		text string
		code codes.Code
		msg  string
	}{
		{"notfound", codes.NotFound, `agent type "Nope" is not registered`},
		{"denied", codes.PermissionDenied, "wrapped: no"},
		{"plain", codes.Internal, "boom"},
		{"panic", codes.Internal, "request to Echo:acme:x: handler panicked (it may have run): kaboom"},
		{"big", codes.ResourceExhausted, "the turn ran, but its reply of 4099 bytes exceeds the maximum of 2048"},
	} {
		_, err := a.tr.Ask(ctx, b.addr, requestEnv(tc.text))
		wantCode(t, err, tc.code)
		if err.Error() != tc.msg {
			t.Errorf("%s: message %q, want %q", tc.text, err.Error(), tc.msg)
		}
		if errors.Is(err, ErrNotDelivered) {
			t.Errorf("%s: %v is ErrNotDelivered: the handler ran it", tc.text, err)
		}
	}
	// A handler's refusal before it ran anything (its error's NotRun says
	// so) reaches the sender as ErrNotDelivered, with its code: the request
	// may be sent again.
	_, err := a.tr.Ask(ctx, b.addr, requestEnv("notrun"))
	wantCode(t, err, codes.Unavailable)
	if !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "silo is shutting down") {
		t.Errorf("a request the handler refused before running it failed with %v: want ErrNotDelivered", err)
	}
	r, err := a.tr.Ask(ctx, b.addr, requestEnv("nil"))
	if err != nil || r == nil {
		t.Fatalf("nil reply: %v, %v", r, err)
	}
	// Too large to send: refused before it leaves.
	big := requestEnv("ok")
	big.Message.Data = make([]byte, 4096)
	_, err = a.tr.Ask(ctx, b.addr, big)
	wantCode(t, err, codes.ResourceExhausted)
	wantCode(t, a.tr.Send(ctx, b.addr, big), codes.ResourceExhausted)
	_, err = a.tr.Ask(ctx, b.addr, &Envelope{})
	wantCode(t, err, codes.InvalidArgument)
	// The stream survived all of it.
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("ok")); err != nil {
		t.Fatal(err)
	}
}

// notRunErr is an error of a handler that refused a request before running
// it, as grain's refusals are.
type notRunErr struct{ error }

func (e notRunErr) Unwrap() error { return e.error }
func (notRunErr) NotRun() bool    { return true }

// near reports whether ms, a handler's deadline in Unix ms, is want rounded
// up to the shared deadlines' tick.
func near(ms string, want int64) bool {
	got, err := strconv.ParseInt(ms, 10, 64)
	return err == nil && got >= want && got < want+deadline.Tick/int64(time.Millisecond)
}

func TestTransportDeadline(t *testing.T) {
	checkLeaks(t)
	hold := make(chan struct{})
	hb := &testHandler{request: func(ctx context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		switch env.Message.Message {
		case "block":
			<-ctx.Done()
			return nil, ctx.Err()
		case "hold": // past the caller's deadline
			<-hold
			return env.Message.Response(), nil
		}
		r := env.Message.Response()
		if dl, ok := ctx.Deadline(); ok {
			r.Message = fmt.Sprint(dl.UnixMilli())
		}
		return r, nil
	}}
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)

	// The caller's deadline bounds the handler's ctx.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	dl, _ := ctx.Deadline()
	r, err := a.tr.Ask(ctx, b.addr, requestEnv("when"))
	if err != nil {
		t.Fatal(err)
	}
	// (rounded up to the tick of the shared deadlines)
	if !near(r.Message, dl.UnixMilli()) {
		t.Fatalf("handler deadline %q, want %d", r.Message, dl.UnixMilli())
	}
	// An earlier deadline already in the envelope is kept.
	env := requestEnv("when")
	env.DeadlineUnixMs = dl.UnixMilli() - 1000
	if r, err = a.tr.Ask(ctx, b.addr, env); err != nil || !near(r.Message, env.DeadlineUnixMs) {
		t.Fatalf("reply %v, %v", r, err)
	}
	// A caller whose deadline passes gets DeadlineExceeded, whether it gave
	// up first or the handler's ctx ended first (or the request arrived too
	// late to be handled).
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = a.tr.Ask(short, b.addr, requestEnv("block"))
	wantCode(t, err, codes.DeadlineExceeded)
	// A caller that gave up on a request it sent says it may have run.
	held, cancelHeld := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelHeld()
	_, err = a.tr.Ask(held, b.addr, requestEnv("hold"))
	close(hold)
	wantCode(t, err, codes.DeadlineExceeded)
	if !strings.Contains(err.Error(), "after it was sent: it may have run") {
		t.Errorf("an Ask given up after it was sent: %v, want it to say it may have run", err)
	}
	// A request whose deadline has passed is not sent.
	_, err = a.tr.Ask(short, b.addr, requestEnv("late"))
	wantCode(t, err, codes.DeadlineExceeded)
	// Nor is one whose envelope deadline has passed handled.
	env = requestEnv("when")
	env.DeadlineUnixMs = time.Now().Add(-time.Second).UnixMilli()
	_, err = a.tr.Ask(ctx, b.addr, env)
	wantCode(t, err, codes.DeadlineExceeded)
}

func TestTransportDeadPeer(t *testing.T) {
	checkLeaks(t)
	const n = 5
	started := make(chan struct{}, n)
	hb := &testHandler{request: func(ctx context.Context, _ string, _ *Envelope) (*agentsilov1.AgentMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	c := startSilo(t, "c", "127.0.0.3:0", nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	errc := make(chan error, n)
	for range n {
		go func() {
			_, err := a.tr.Ask(ctx, b.addr, requestEnv("stuck"))
			errc <- err
		}()
	}
	for range n {
		<-started
	}
	if r, err := a.tr.Ask(ctx, c.addr, requestEnv("c")); err != nil || r.Message != "echo:c" {
		t.Fatalf("ask c while b is stuck: %v, %v", r, err)
	}
	b.stop()
	for range n {
		// Delivered (b started them): they may have run.
		err := <-errc
		wantCode(t, err, codes.Unavailable)
		if errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "may have run") {
			t.Errorf("an Ask b received failed with %v: want no ErrNotDelivered, and saying it may have run", err)
		}
	}
	if r, err := a.tr.Ask(ctx, c.addr, requestEnv("c")); err != nil || r.Message != "echo:c" {
		t.Fatalf("ask c after b died: %v, %v", r, err)
	}
	_, err := a.tr.Ask(ctx, b.addr, requestEnv("b"))
	wantCode(t, err, codes.Unavailable)
	if !errors.Is(err, ErrNotDelivered) {
		t.Errorf("an Ask to a peer whose stream is down failed with %v, want ErrNotDelivered", err)
	}
}

func TestTransportReconnect(t *testing.T) {
	checkLeaks(t)
	b := startSilo(t, "b", "127.0.0.2:0", nil, nil, nil)
	ups := make(chan struct{}, 10)
	downs := make(chan struct{}, 1)
	a := startSilo(t, "a", "127.0.0.1:0", nil, func(cfg *Config) {
		cfg.OnPeerState = func(addr string, up bool) {
			if addr != b.addr {
				return
			}
			if up {
				ups <- struct{}{}
				return
			}
			select {
			case downs <- struct{}{}:
			default:
			}
		}
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("1")); err != nil {
		t.Fatal(err)
	}
	<-ups
	b.stop()
	<-downs
	_, err := a.tr.Ask(ctx, b.addr, requestEnv("2"))
	wantCode(t, err, codes.Unavailable)

	b2 := startSilo(t, "b2", b.addr, nil, nil, nil)
	<-ups // a reopened its stream on its own
	r, err := a.tr.Ask(ctx, b.addr, requestEnv("3"))
	if err != nil {
		t.Fatal(err)
	}
	if r.State["silo"] != "b2" || r.State["from"] != "a" {
		t.Fatalf("reply %v", r)
	}
	if err := a.tr.Send(ctx, b2.addr, requestEnv("4")); err != nil {
		t.Fatal(err)
	}
}

func TestTransportClose(t *testing.T) {
	checkLeaks(t)
	started := make(chan struct{}, 1)
	hb := &testHandler{request: func(ctx context.Context, _ string, _ *Envelope) (*agentsilov1.AgentMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	c := startSilo(t, "c", "127.0.0.3:0", nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.tr.Ask(ctx, c.addr, requestEnv("c")); err != nil {
		t.Fatal(err)
	}
	// ClosePeer fails what is pending to that peer only; the next Ask dials
	// anew.
	errc := make(chan error, 1)
	go func() {
		_, err := a.tr.Ask(ctx, b.addr, requestEnv("stuck"))
		errc <- err
	}()
	<-started
	a.tr.ClosePeer(b.addr)
	wantCode(t, <-errc, codes.Unavailable)
	if _, err := a.tr.Ask(ctx, c.addr, requestEnv("c")); err != nil {
		t.Fatal(err)
	}
	// Close fails what is pending, and everything after.
	go func() {
		_, err := a.tr.Ask(ctx, b.addr, requestEnv("stuck"))
		errc <- err
	}()
	<-started
	a.tr.Close()
	wantCode(t, <-errc, codes.Unavailable)
	_, err := a.tr.Ask(ctx, c.addr, requestEnv("c"))
	wantCode(t, err, codes.Unavailable)
	a.tr.Close()
}

func TestTransportConfig(t *testing.T) {
	for _, n := range []int{-1, MaxReceivedBatch + 1} {
		if _, err := New(Config{MaxBatch: n}); errs.Code(err) != codes.InvalidArgument {
			t.Fatalf("MaxBatch %d: %v", n, err)
		}
	}
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}

// A stream message of more envelopes than MaxReceivedBatch ends its stream
// with an error; the silo goes on serving its other streams.
func TestTransportBatchBound(t *testing.T) {
	checkLeaks(t)
	hb := &testHandler{}
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	ctx := t.Context()
	conn, err := grpc.NewClient("passthrough:///"+b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := agentsilov1.NewPeerClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A hello, a stream message of cancel notices (harmless, but one too
	// many), then a request: it must not be answered.
	big := &agentsilov1.PeerBatch{Envelopes: make([]*Envelope, MaxReceivedBatch+1)}
	for i := range big.Envelopes {
		big.Envelopes[i] = &Envelope{Cancel: true, CallId: uint64(i + 100)}
	}
	req := requestEnv("x")
	req.Kind, req.CallId = agentsilov1.Kind_KIND_REQUEST, 1
	for _, b := range []*agentsilov1.PeerBatch{
		{Hello: &agentsilov1.PeerHello{Silo: "raw"}},
		big,
		{Envelopes: []*Envelope{req}},
	} {
		if err := st.Send(b); errors.Is(err, io.EOF) {
			break // the silo already ended the stream: Recv says how
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for {
		r, err := st.Recv()
		if err == nil && len(r.Envelopes) == 0 {
			continue // the silo's hello
		}
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("after %d envelopes in one stream message: %v, %v; want the stream to fail", len(big.Envelopes), r, err)
		}
		break
	}
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("after")); err != nil {
		t.Fatal(err)
	}
	a.tr.Close()
}

// TestTransportBadUTF8: a message that cannot be encoded fails its own call
// with InvalidArgument before it joins a batch, and a reply that cannot be
// encoded is the call's Internal error; the stream, and the calls around
// them, go on. Before, either broke the peer stream (the whole batch
// failed to encode) and failed every call in flight on it.
func TestTransportBadUTF8(t *testing.T) {
	checkLeaks(t)
	hb := &testHandler{}
	hb.request = func(_ context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		r := env.Message.Response()
		r.Message = "echo:" + env.Message.Message
		if env.Message.Message == "bad reply" {
			r.Message = "\xff"
		}
		return r, nil
	}
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	var downs atomic.Int32
	a := startSilo(t, "a", "127.0.0.1:0", nil, func(c *Config) {
		c.OnPeerState = func(_ string, up bool) {
			if !up {
				downs.Add(1)
			}
		}
	}, nil)
	ctx := context.Background()
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("warm up")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	errc := make(chan error, n)
	for i := range n {
		go func() {
			r, err := a.tr.Ask(ctx, b.addr, requestEnv(fmt.Sprint(i)))
			if err == nil && r.Message != fmt.Sprint("echo:", i) {
				err = fmt.Errorf("ask %d: reply %q", i, r.Message)
			}
			errc <- err
		}()
	}
	bad := requestEnv("x")
	bad.Message.State = map[string]string{"k": "\xfe"}
	_, err := a.tr.Ask(ctx, b.addr, bad)
	wantCode(t, err, codes.InvalidArgument)
	wantCode(t, a.tr.Send(ctx, b.addr, requestEnv("\xff")), codes.InvalidArgument)
	_, err = a.tr.Ask(ctx, b.addr, requestEnv("bad reply"))
	wantCode(t, err, codes.Internal)
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("after")); err != nil {
		t.Fatal(err)
	}
	if d := downs.Load(); d != 0 {
		t.Fatalf("the stream broke %d times", d)
	}
}
