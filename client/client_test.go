package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// silo is an in-process runtime and gateway on 127.0.0.1 with test agents:
//
//   - Echo replies with the text it got.
//   - Progress pushes n (state "n", default 2) one-way messages "p1".."pn" to
//     its sender, then replies "done".
//   - Slow reports on started, then waits for its context to end and
//     reports on cancelled.
//   - Fail returns FailedPrecondition.
type silo struct {
	addr      string
	rt        *grain.Runtime
	started   chan string
	cancelled chan string
	stop      func()
}

func newSilo() (*silo, error) {
	s := &silo{started: make(chan string, 16), cancelled: make(chan string, 16)}
	reg := grain.NewRegistry()
	types := map[string]func(grain.Host, context.Context, *grain.Message) (*grain.Message, error){
		"Echo": func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.Message = m.Message
			return r, nil
		},
		"Progress": func(h grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error) {
			n := 2
			if v := m.State["n"]; v != "" {
				fmt.Sscan(v, &n)
			}
			for i := 1; i <= n; i++ {
				if err := h.Send(ctx, m.From, &grain.Message{MessageType: "progress", Message: fmt.Sprint("p", i)}); err != nil {
					return nil, err
				}
			}
			r := m.Response()
			r.Message = "done"
			return r, nil
		},
		"Slow": func(_ grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error) {
			s.started <- m.Message
			<-ctx.Done()
			s.cancelled <- m.Message
			return nil, ctx.Err()
		},
		"Fail": func(grain.Host, context.Context, *grain.Message) (*grain.Message, error) {
			return nil, errs.New(codes.FailedPrecondition, "not now")
		},
	}
	for name, f := range types {
		err := reg.Register(name, func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) { return f(h, ctx, m) }), nil
		})
		if err != nil {
			return nil, err
		}
	}
	logger := slog.New(slog.DiscardHandler)
	rcfg := grain.DefaultConfig()
	rcfg.Logger = logger
	gcfg := gateway.DefaultConfig()
	gcfg.Addr = "127.0.0.1:0"
	gcfg.Logger = logger
	sessions, err := gateway.NewSessions(gcfg, "")
	if err != nil {
		return nil, err
	}
	siloapi.Wire(&rcfg, siloapi.Wiring{Sessions: sessions})
	rt, err := grain.New(rcfg, reg)
	if err != nil {
		return nil, err
	}
	gw, err := gateway.New(gcfg, rt, sessions)
	if err == nil {
		var lis net.Listener
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
			served := make(chan error, 1)
			go func() { served <- gw.Serve(lis) }()
			s.addr, s.rt = lis.Addr().String(), rt
			var once sync.Once
			s.stop = func() {
				once.Do(func() {
					gw.Stop()
					<-served
					rt.Close(context.Background())
				})
			}
			return s, nil
		}
		gw.Stop()
	}
	rt.Close(context.Background())
	return nil, err
}

type agentFunc func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f agentFunc) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// start starts a silo for t and checks, once t is done, that nothing leaked.
func start(t *testing.T) *silo {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	s, err := newSilo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

func dial(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestAsk(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr}, client.WithPrincipal("alice"), client.WithAPIKey("ignored-for-now"))
	if !strings.HasPrefix(c.Address(), "Session:alice:") || c.Principal() != "alice" {
		t.Fatalf("session %s as %s", c.Address(), c.Principal())
	}
	msg := &client.Message{Message: "hi", From: "Echo:system:forged"}
	r, err := c.Ask(t.Context(), "Echo:one", msg)
	if err != nil || r.Message != "hi" || r.From != "Echo:alice:one" || r.To != c.Address() {
		t.Fatalf("Ask: %v, %v", r, err)
	}
	if msg.To != "" || msg.Kind != 0 {
		t.Fatalf("Ask modified the caller's message: %v", msg)
	}
	if r, err := c.Ask(t.Context(), "Echo:one", nil); err != nil || r.Message != "" {
		t.Fatalf("Ask with nil message: %v, %v", r, err)
	}
}

func TestPushesAndOneWay(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	r, err := c.Ask(t.Context(), "Progress:p", &client.Message{State: map[string]string{"n": "3"}})
	if err != nil || r.Message != "done" {
		t.Fatalf("Ask: %v, %v", r, err)
	}
	// The pushes came before the reply, so they are waiting already.
	for i := 1; i <= 3; i++ {
		m := <-c.Messages()
		if m.Message != fmt.Sprint("p", i) || m.From != "Progress:dev:p" || m.MessageType != "progress" {
			t.Fatalf("push %d: %v", i, m)
		}
	}
	if err := c.Send(t.Context(), "Progress:q", nil); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if m := <-c.Messages(); m.Message != fmt.Sprint("p", i) {
			t.Fatalf("push %d after Send: %v", i, m)
		}
	}
	if err := c.Event(t.Context(), "Echo:e", &client.Message{Message: "ignored"}); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadPushesHoldNoReplies: a program that never reads Messages gets
// its replies after more pushes came than the buffer holds; the buffer
// keeps the first ones.
func TestUnreadPushesHoldNoReplies(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	for range 2 {
		r, err := c.Ask(t.Context(), "Progress:p", &client.Message{State: map[string]string{"n": "300"}})
		if err != nil || r.Message != "done" {
			t.Fatalf("Ask: %v, %v", r, err)
		}
	}
	msgs := c.Messages()
	if len(msgs) != cap(msgs) {
		t.Fatalf("%d pushes buffered, want the buffer full (%d)", len(msgs), cap(msgs))
	}
	if m := <-msgs; m.Message != "p1" {
		t.Fatalf("first push buffered: %v", m)
	}
}

// TestReadPushesAreKept: once the program reads Messages, a push that
// finds the buffer full waits for room, and the reply waits behind it.
func TestReadPushesAreKept(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	msgs := c.Messages()
	const n = 300
	type answer struct {
		r   *client.Message
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := c.Ask(t.Context(), "Progress:p", &client.Message{State: map[string]string{"n": fmt.Sprint(n)}})
		done <- answer{r, err}
	}()
	testutil.WaitFor(t, "the push buffer to fill", func() bool { return len(msgs) == cap(msgs) })
	for i := 1; i <= n; i++ {
		if m := <-msgs; m.Message != fmt.Sprint("p", i) {
			t.Fatalf("push %d: %v", i, m)
		}
	}
	if a := <-done; a.err != nil || a.r.Message != "done" {
		t.Fatalf("Ask: %v, %v", a.r, a.err)
	}
}

func TestOnMessage(t *testing.T) {
	s := start(t)
	got := make(chan string, 4)
	c := dial(t, []string{s.addr}, client.WithOnMessage(func(m *client.Message) { got <- m.Message }))
	if _, err := c.Ask(t.Context(), "Progress:p", nil); err != nil {
		t.Fatal(err)
	}
	if a, b := <-got, <-got; a != "p1" || b != "p2" {
		t.Fatalf("pushes %q, %q", a, b)
	}
}

func TestErrors(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr})
	for _, tc := range []struct {
		to, typ string
		want    codes.Code
	}{
		{"Nope:x", "", codes.NotFound},
		{"no-colon", "", codes.InvalidArgument},
		{"Echo:x", "_silo.stop", codes.InvalidArgument},
		{"Fail:x", "", codes.FailedPrecondition},
	} {
		_, err := c.Ask(t.Context(), tc.to, &client.Message{MessageType: tc.typ})
		if status.Code(err) != tc.want || errs.Code(err) != tc.want {
			t.Errorf("Ask %s (type %q): %v, want %v", tc.to, tc.typ, err, tc.want)
		}
	}
	_, err := c.Ask(t.Context(), "Nope:x", nil)
	if !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("errors.Is on %v", err)
	}
	if err := c.Send(t.Context(), "Nope:x", nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Send to an unknown type: %v", err)
	}
}

func TestOversizeIsNotSent(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr}, client.WithMaxMessageSize(2048))
	_, err := c.Ask(t.Context(), "Echo:x", &client.Message{Message: strings.Repeat("x", 4096)})
	if !errors.Is(err, client.ErrResourceExhausted) {
		t.Fatalf("oversize Ask: %v, want ResourceExhausted", err)
	}
	if n := s.rt.Len(); n != 0 {
		t.Fatalf("%d activations: the oversize message reached the silo", n)
	}
}

func TestDeadlineAndCancel(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr}, client.WithTimeout(20*time.Millisecond))
	if _, err := c.Ask(t.Context(), "Slow:x", nil); !errors.Is(err, client.ErrDeadlineExceeded) {
		t.Fatalf("slow Ask: %v, want DeadlineExceeded", err)
	}
	<-s.started
	<-s.cancelled

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Ask(ctx, "Slow:y", nil)
		done <- err
	}()
	<-s.started
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled Ask: %v, want Canceled", err)
	}
	<-s.cancelled // the Cancel frame reached the agent
}

func TestCreateAgentsMembers(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr}, client.WithPrincipal("alice"))
	addr, err := c.Agents().Create(t.Context(), "Echo:cfg", map[string]string{"k": "v"})
	if err != nil || addr != "Echo:alice:cfg" {
		t.Fatalf("CreateAgent: %q, %v", addr, err)
	}
	if _, err := c.Agents().Create(t.Context(), "bad", nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("CreateAgent of a bad address: %v", err)
	}
	if _, err := c.Ask(t.Context(), "Echo:a", nil); err != nil {
		t.Fatal(err)
	}
	agents, err := c.Agents().List(t.Context(), "", "Echo")
	if err != nil || len(agents) != 1 || agents[0].Address != "Echo:alice:a" {
		t.Fatalf("Agents: %v, %v", agents, err)
	}
	members, err := c.Admin().Members(t.Context())
	if err != nil || len(members) != 1 || !members[0].Self || members[0].GatewayAddr != s.addr {
		t.Fatalf("Members: %v, %v", members, err)
	}
}

func TestDialUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	leaks := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, leaks)
	if _, err := client.Dial(t.Context(), []string{addr}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Dial %s: %v, want Unavailable", addr, err)
	}
	if _, err := client.Dial(t.Context(), nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Dial without addresses: %v, want InvalidArgument", err)
	}
}

func TestFailover(t *testing.T) {
	a, b := start(t), start(t)
	c := dial(t, []string{a.addr, b.addr})
	if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
		t.Fatal(err)
	}
	first := c.Address()
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Ask(t.Context(), "Slow:x", nil)
		inflight <- err
	}()
	<-a.started
	a.stop()
	if err := <-inflight; !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("call in flight on the dead gateway: %v, want Unavailable", err)
	}
	r, err := c.Ask(t.Context(), "Echo:x", &client.Message{Message: "on b"})
	if err != nil || r.Message != "on b" {
		t.Fatalf("Ask after failover: %v, %v", r, err)
	}
	// b never held the session, so it opened a new one.
	if c.Address() == first || !strings.HasPrefix(c.Address(), "Session:dev:") {
		t.Fatalf("session %s after failover from %s", c.Address(), first)
	}
	if err := b.rt.Send(t.Context(), &grain.Message{To: c.Address(), From: "Echo:dev:b", Message: "via b"}); err != nil {
		t.Fatal(err)
	}
	if m := <-c.Messages(); m.Message != "via b" {
		t.Fatalf("push %v", m)
	}
}

func TestReattachResumesSession(t *testing.T) {
	s := start(t)
	p := newProxy(t, s.addr)
	c := dial(t, []string{p.addr()})
	if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
		t.Fatal(err)
	}
	first := c.Address()
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Ask(t.Context(), "Slow:x", nil)
		inflight <- err
	}()
	<-s.started
	p.cut()
	if err := <-inflight; !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("call in flight on the cut stream: %v, want Unavailable", err)
	}
	if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
		t.Fatalf("Ask after re-attach: %v", err)
	}
	if c.Address() != first {
		t.Fatalf("session %s after re-attach, want %s resumed", c.Address(), first)
	}
	if err := s.rt.Send(t.Context(), &grain.Message{To: first, From: "Echo:dev:x", Message: "again"}); err != nil {
		t.Fatal(err)
	}
	if m := <-c.Messages(); m.Message != "again" {
		t.Fatalf("push %v", m)
	}
}

// A call made while no gateway can be reached waits, through failed rounds
// of re-attaching, until one can (it was not sent, so sending it late is
// safe), within its deadline; at the deadline it fails saying why.
func TestCallWaitsForGateway(t *testing.T) {
	s := start(t)
	p := newProxy(t, s.addr)
	c := dial(t, []string{p.addr()})
	if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
		t.Fatal(err)
	}
	p.refusing.Store(true)
	p.cut()
	testutil.WaitFor(t, "a refused re-attach", func() bool { return p.refused.Load() >= 1 })
	// One call that waits it out, one whose deadline comes first.
	done := make(chan error, 1)
	go func() {
		r, err := c.Ask(t.Context(), "Echo:x", &client.Message{Message: "late"})
		if err == nil && r.Message != "late" {
			err = fmt.Errorf("reply %q", r.Message)
		}
		done <- err
	}()
	short, cancel := context.WithCancel(t.Context())
	shortErr := make(chan error, 1)
	go func() {
		_, err := c.Ask(short, "Echo:x", nil)
		shortErr <- err
	}()
	// Two more rounds fail while both wait.
	n := p.refused.Load()
	testutil.WaitFor(t, "two more refused re-attaches", func() bool { return p.refused.Load() >= n+2 })
	select {
	case err := <-done:
		t.Fatalf("a call made while no gateway was reachable returned %v before one was", err)
	default:
	}
	cancel()
	if err := <-shortErr; status.Code(err) != codes.Canceled || !strings.Contains(err.Error(), "none reachable") {
		t.Fatalf("call cancelled while waiting: %v", err)
	}
	p.refusing.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("the waiting call, once a gateway was back: %v", err)
	}
}

func TestCloseEndsCalls(t *testing.T) {
	s := start(t)
	c, err := client.Dial(t.Context(), []string{s.addr})
	if err != nil {
		t.Fatal(err)
	}
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Ask(t.Context(), "Slow:x", nil)
		inflight <- err
	}()
	<-s.started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-inflight; !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("call in flight at Close: %v, want Unavailable", err)
	}
	if _, ok := <-c.Messages(); ok {
		t.Fatal("Messages not closed")
	}
	if _, err := c.Ask(t.Context(), "Echo:x", nil); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Ask after Close: %v, want Unavailable", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// proxy forwards TCP connections to a target and can cut them all, to break
// a client's stream while the gateway stays up.
type proxy struct {
	lis    net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	// While refusing, each connection accepted is closed at once (as a
	// gateway that is down), and counted.
	refusing atomic.Bool
	refused  atomic.Int64
}

func newProxy(t *testing.T, target string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		lis.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		if p.refusing.Load() {
			in.Close()
			p.refused.Add(1)
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A gateway that ends the session's stream each time at once (here: every
// stream breaks right after its Welcome, as one did that could not write a
// push it held for the session, before gateways checked pushes)
// makes the client pause before each new stream, longer each time, instead
// of asking it for thousands a second. The first break is re-attached at
// once.
func TestFlappingStreamBacksOff(t *testing.T) {
	s := start(t)
	// Without pauses the client would open streams without end: give up
	// after a thousand.
	var streams atomic.Int64
	var breaking atomic.Bool
	tooMany := make(chan struct{})
	count := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if streams.Add(1) == 1000 {
			close(tooMany)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &breakingStream{ClientStream: cs, breaking: &breaking}, nil
	})
	c := dial(t, []string{s.addr}, client.WithDialOptions(count))
	var (
		mu     sync.Mutex
		pauses []time.Duration
	)
	four := make(chan struct{})
	client.SetAfter(c, func(d time.Duration) <-chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		pauses = append(pauses, d)
		switch len(pauses) {
		case 4:
			close(four)
			return nil // pause until Close
		case 1, 2, 3:
			fired := make(chan time.Time, 1)
			fired <- time.Time{}
			return fired
		}
		return nil
	})
	// Break the session's stream, and every one after it.
	breaking.Store(true)
	if err := s.rt.Send(t.Context(), &grain.Message{To: c.Address(), From: "Echo:dev:e", Message: "break"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-four:
	case <-tooMany:
		t.Fatal("a thousand streams opened without four pauses")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if fmt.Sprint(pauses) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
}

// breakingStream breaks, once breaking is set, at any message but its first
// (a session's Welcome): see TestFlappingStreamBacksOff.
type breakingStream struct {
	grpc.ClientStream
	breaking *atomic.Bool
	n        int
}

func (s *breakingStream) RecvMsg(m any) error {
	if s.n++; s.n > 1 && s.breaking.Load() {
		return status.Error(codes.Unavailable, "broken by the test")
	}
	return s.ClientStream.RecvMsg(m)
}

// TestRefusedBeforeRunIsSentAgain: a call that the gateway's silo refuses
// before any agent ran it (here: its runtime is shutting down, its gateway
// still up) is sent again until its context ends instead of failing at once
// (once the session moves to a gateway whose silo serves, as when a fenced
// silo's gateway goes, it is answered there). Its error then says it was
// refused, whether the end came in a pause between sends or while it was
// sent again (then it may have run).
func TestRefusedBeforeRunIsSentAgain(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprintf("in-flight=%t", inFlight), func(t *testing.T) {
			a := start(t)
			cc := &callCounter{sent: make(chan struct{}, 100), results: make(chan struct{}, 100), release: make(chan struct{})}
			if inFlight {
				cc.holdAt = 4 // the third send of the refused call: its result waits
			}
			defer close(cc.release)
			c := dial(t, []string{a.addr}, client.WithDialOptions(grpc.WithStreamInterceptor(cc.intercept)))
			if _, err := c.Ask(t.Context(), "Echo:x", nil); err != nil {
				t.Fatal(err)
			}
			<-cc.sent
			if err := a.rt.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := c.Ask(ctx, "Echo:x", nil)
				errc <- err
			}()
			if inFlight {
				for range 3 { // refused twice, sent a third time
					<-cc.sent
				}
			} else {
				for range 3 { // the first answer was the first Ask's
					<-cc.results
				}
			}
			cancel()
			err := <-errc
			if errs.Code(err) != codes.Canceled || !strings.Contains(err.Error(), "refused before it ran") || !strings.Contains(err.Error(), "shutting down") ||
				inFlight && !strings.Contains(err.Error(), "may have run") {
				t.Fatalf("an Ask a's runtime refuses, cancelled: %v; want Canceled, saying it was refused before it ran (and, cancelled while sent again, that it may have run)", err)
			}
		})
	}
}

// callCounter tells sent of each Call frame a session stream sends, and
// results of each Result it reads; from the holdAt-th send on (if set), the
// stream's reads wait for release.
type callCounter struct {
	sent    chan struct{}
	results chan struct{}
	holdAt  int64
	n       atomic.Int64
	release chan struct{}
}

func (cc *callCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, conn, method, opts...)
	return countedStream{ClientStream: cs, cc: cc}, err
}

type countedStream struct {
	grpc.ClientStream
	cc *callCounter
}

func (s countedStream) SendMsg(m any) error {
	if f, ok := m.(*agentsilov1.ClientFrame); ok && f.GetCall() != nil {
		s.cc.n.Add(1)
		select {
		case s.cc.sent <- struct{}{}:
		default:
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s countedStream) RecvMsg(m any) error {
	if h := s.cc.holdAt; h != 0 && s.cc.n.Load() >= h {
		<-s.cc.release
	}
	err := s.ClientStream.RecvMsg(m)
	if f, ok := m.(*agentsilov1.ServerFrame); ok && err == nil && f.GetResult() != nil {
		select {
		case s.cc.results <- struct{}{}:
		default:
		}
	}
	return err
}
