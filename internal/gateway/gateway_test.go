package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// testEnv is a runtime and its gateway serving on 127.0.0.1, with a client
// connection to it and the test agents:
//
//   - Echo replies with the text it got.
//   - Who replies with the sender's address (msg.From).
//   - Push sends n (state "n", default 2) one-way messages "p1".."pn" to the
//     sender, then replies "done".
//   - Slow reports on started, waits for its context to end (or release),
//     then reports on cancelled.
//   - Panic panics; Fail returns FailedPrecondition.
//   - BadUTF8 replies with a text that is not UTF-8.
type testEnv struct {
	gw   *Gateway
	rt   *grain.Runtime
	conn *grpc.ClientConn
	cli  agentsilov1.GatewayClient

	started   chan string   // Slow: the text of a message it began
	cancelled chan string   // Slow: the text of a message whose ctx ended
	release   chan struct{} // Slow: closed to let every Slow turn reply
	detached  chan string   // session addresses as streams detach
	// onOpened, if set, is called as a session stream has found or made its
	// session, before it attaches (Gateway.testHookOpened).
	onOpened atomic.Pointer[func(addr string)]
}

func startGateway(t testing.TB, configure func(*Config)) *testEnv {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	e := &testEnv{
		started:   make(chan string, 16),
		cancelled: make(chan string, 16),
		release:   make(chan struct{}),
		detached:  make(chan string, 16),
	}
	gcfg := DefaultConfig()
	gcfg.Addr = "127.0.0.1:0"
	gcfg.Silo = "test-silo"
	gcfg.Logger = slog.New(slog.DiscardHandler)
	if configure != nil {
		configure(&gcfg)
	}

	reg := grain.NewRegistry()
	register := func(name string, f func(h grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error)) {
		t.Helper()
		err := reg.Register(name, func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) { return f(h, ctx, m) }), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	register("Echo", func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
		r := m.Response()
		r.Message = m.Message
		return r, nil
	})
	register("Who", func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
		r := m.Response()
		r.Message = m.From
		return r, nil
	})
	register("Push", func(h grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error) {
		n := 2
		if s := m.State["n"]; s != "" {
			fmt.Sscan(s, &n)
		}
		for i := 1; i <= n; i++ {
			if err := h.Send(ctx, m.From, grain.Text(fmt.Sprintf("p%d", i))); err != nil {
				return nil, err
			}
		}
		r := m.Response()
		r.Message = "done"
		return r, nil
	})
	register("Slow", func(_ grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error) {
		e.started <- m.Message
		select {
		case <-ctx.Done():
			e.cancelled <- m.Message
			return nil, ctx.Err()
		case <-e.release:
			r := m.Response()
			r.Message = "released"
			return r, nil
		}
	})
	register("Panic", func(grain.Host, context.Context, *grain.Message) (*grain.Message, error) {
		panic("boom")
	})
	register("Fail", func(grain.Host, context.Context, *grain.Message) (*grain.Message, error) {
		return nil, errs.New(codes.FailedPrecondition, "not now")
	})
	register("BadUTF8", func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
		r := m.Response()
		r.Message = "\xff" + m.Message
		return r, nil
	})

	rcfg := grain.DefaultConfig()
	rcfg.Silo = gcfg.Silo
	rcfg.MaxMessageSize = gcfg.MaxMessageSize
	rcfg.Logger = gcfg.Logger
	sessions, err := NewSessions(gcfg, "")
	if err != nil {
		t.Fatal(err)
	}
	siloapi.Wire(&rcfg, siloapi.Wiring{Sessions: sessions})
	rt, err := grain.New(rcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(gcfg, rt, sessions)
	if err != nil {
		t.Fatal(err)
	}
	gw.testHookDetached = func(addr string) {
		select {
		case e.detached <- addr:
		default:
		}
	}
	gw.testHookOpened = func(addr string) {
		if f := e.onOpened.Load(); f != nil {
			(*f)(addr)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gw.Stop()
		// Serve may not have begun before Stop (a loaded machine), and then
		// returns ErrServerStopped at once.
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
		if err := rt.Close(context.Background()); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	e.gw, e.rt, e.conn, e.cli = gw, rt, conn, agentsilov1.NewGatewayClient(conn)
	return e
}

type agentFunc func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f agentFunc) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// testSession is one Session stream.
type testSession struct {
	t       *testing.T
	stream  agentsilov1.Gateway_SessionClient
	cancel  context.CancelFunc // disconnects
	welcome *agentsilov1.Welcome
	nextID  uint64
}

// dial opens a Session stream and sends hello, without reading the answer.
func (e *testEnv) dial(t *testing.T, hello *agentsilov1.Hello) *testSession {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stream, err := e.cli.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return &testSession{t: t, stream: stream, cancel: cancel}
}

// open opens a session and reads its Welcome.
func (e *testEnv) open(t *testing.T, hello *agentsilov1.Hello) *testSession {
	t.Helper()
	s := e.dial(t, hello)
	f, err := s.stream.Recv()
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if s.welcome = f.GetWelcome(); s.welcome == nil {
		t.Fatalf("first frame %v, want Welcome", f)
	}
	return s
}

// call sends a Call and returns its id.
func (s *testSession) call(m *agentsilov1.AgentMessage, timeoutMs int64) uint64 {
	s.t.Helper()
	s.nextID++
	err := s.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Call{Call: &agentsilov1.Call{CallId: s.nextID, Message: m, TimeoutMs: timeoutMs}}})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.nextID
}

// recv reads the next frame.
func (s *testSession) recv() *agentsilov1.ServerFrame {
	s.t.Helper()
	f, err := s.stream.Recv()
	if err != nil {
		s.t.Fatalf("Recv: %v", err)
	}
	return f
}

// result reads frames up to the Result of call id and returns it, with the
// texts of the pushes before it.
func (s *testSession) result(id uint64) (*agentsilov1.Result, []string) {
	s.t.Helper()
	var pushes []string
	for {
		f := s.recv()
		if p := f.GetPush(); p != nil {
			pushes = append(pushes, p.Message)
			continue
		}
		if r := f.GetResult(); r != nil && r.CallId == id {
			return r, pushes
		}
		s.t.Fatalf("unexpected frame %v while waiting for result %d", f, id)
	}
}

// ask makes a REQUEST call and returns its result.
func (s *testSession) ask(to, text string) *agentsilov1.Result {
	s.t.Helper()
	r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: to, Message: text, Kind: agentsilov1.Kind_KIND_REQUEST}, 0))
	return r
}

func wantCode(t *testing.T, r *agentsilov1.Result, want codes.Code) {
	t.Helper()
	if got := codes.Code(r.GetError().GetCode()); got != want {
		t.Fatalf("result %v: code %v, want %v", r, got, want)
	}
}

func wantText(t *testing.T, r *agentsilov1.Result, want string) {
	t.Helper()
	if r.GetError() != nil || r.GetMessage().GetMessage() != want {
		t.Fatalf("result %v, want message %q", r, want)
	}
}

func TestAskRoundTrip(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	w := s.welcome
	if !strings.HasPrefix(w.Address, "Session:alice:") || w.Principal != "alice" || w.Silo != "test-silo" || len(w.ResumeToken) != 32 || w.Resumed {
		t.Fatalf("welcome %v", w)
	}
	wantText(t, s.ask("Echo:alice:one", "hi"), "hi")
	// Relative to the session's principal.
	wantText(t, s.ask("Who:two", "?"), w.Address)

	// The unary form, with the principal from metadata.
	ctx := metadata.AppendToOutgoingContext(t.Context(), protocol.PrincipalHeader, "bob")
	r, err := e.cli.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:one", Message: "unary"}})
	if err != nil || r.Message.Message != "unary" || r.Message.From != "Echo:bob:one" {
		t.Fatalf("unary Ask: %v, %v", r, err)
	}
}

func TestDefaultPrincipalAndBadPrincipal(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	if s.welcome.Principal != DefaultPrincipal {
		t.Fatalf("principal %q, want %q", s.welcome.Principal, DefaultPrincipal)
	}
	bad := e.dial(t, &agentsilov1.Hello{Principal: "no spaces"})
	if _, err := bad.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad principal: %v, want InvalidArgument", err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), protocol.PrincipalHeader, ":x")
	if _, err := e.cli.ListMembers(ctx, &agentsilov1.ListMembersRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad unary principal: %v, want InvalidArgument", err)
	}
}

func TestForgedFromIgnored(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	id := s.call(&agentsilov1.AgentMessage{To: "Who:alice:w", From: "Echo:system:admin", CallChainId: "forged", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	r, _ := s.result(id)
	wantText(t, r, s.welcome.Address)
}

func TestPushToSession(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	id := s.call(&agentsilov1.AgentMessage{To: "Push:dev:p", Kind: agentsilov1.Kind_KIND_REQUEST, State: map[string]string{"n": "3"}}, 0)
	r, pushes := s.result(id)
	wantText(t, r, "done")
	if got := strings.Join(pushes, ","); got != "p1,p2,p3" {
		t.Fatalf("pushes %q before the reply, want p1,p2,p3", got)
	}

	// The runtime routes to the session too, and a push carries its sender.
	if err := e.rt.Send(t.Context(), &grain.Message{To: s.welcome.Address, From: "Echo:dev:e", Message: "direct"}); err != nil {
		t.Fatal(err)
	}
	p := s.recv().GetPush()
	if p.GetMessage() != "direct" || p.GetFrom() != "Echo:dev:e" || p.GetKind() != agentsilov1.Kind_KIND_ONE_WAY {
		t.Fatalf("push %v", p)
	}
}

func TestUnknownSessionNotFound(t *testing.T) {
	e := startGateway(t, nil)
	err := e.rt.Send(t.Context(), &grain.Message{To: "Session:dev:nobody", From: "Echo:dev:e"})
	if !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("send to unknown session: %v, want NotFound", err)
	}
}

func TestResumeDeliversBacklogInOrder(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	addr, token := s.welcome.Address, s.welcome.ResumeToken
	s.cancel()
	if got := <-e.detached; got != addr {
		t.Fatalf("detached %s, want %s", got, addr)
	}
	for i := 1; i <= 3; i++ {
		if err := e.rt.Send(t.Context(), &grain.Message{To: addr, From: "Echo:alice:e", Message: fmt.Sprint("m", i)}); err != nil {
			t.Fatal(err)
		}
	}
	s2 := e.open(t, &agentsilov1.Hello{Principal: "alice", ResumeAddress: addr, ResumeToken: token})
	if !s2.welcome.Resumed || s2.welcome.Address != addr {
		t.Fatalf("welcome %v, want resumed %s", s2.welcome, addr)
	}
	for i := 1; i <= 3; i++ {
		if p := s2.recv().GetPush(); p.GetMessage() != fmt.Sprint("m", i) {
			t.Fatalf("push %d: %v", i, p)
		}
	}
	wantText(t, s2.ask("Echo:x", "after"), "after")
}

func TestResumeTakesOverAttachedSession(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	s2 := e.open(t, &agentsilov1.Hello{ResumeAddress: s.welcome.Address, ResumeToken: s.welcome.ResumeToken})
	if !s2.welcome.Resumed {
		t.Fatalf("welcome %v, want resumed", s2.welcome)
	}
	if err := e.rt.Send(t.Context(), &grain.Message{To: s.welcome.Address, From: "Echo:dev:e", Message: "to the new stream"}); err != nil {
		t.Fatal(err)
	}
	if p := s2.recv().GetPush(); p.GetMessage() != "to the new stream" {
		t.Fatalf("push %v", p)
	}
}

func TestResumeRefusedOrRenewed(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})

	wrong := e.dial(t, &agentsilov1.Hello{Principal: "alice", ResumeAddress: s.welcome.Address, ResumeToken: "00"})
	if _, err := wrong.stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("wrong token: %v, want PermissionDenied", err)
	}
	other := e.dial(t, &agentsilov1.Hello{Principal: "bob", ResumeAddress: s.welcome.Address, ResumeToken: s.welcome.ResumeToken})
	if _, err := other.stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("other principal: %v, want PermissionDenied", err)
	}

	unknown := e.open(t, &agentsilov1.Hello{Principal: "alice", ResumeAddress: "Session:alice:gone", ResumeToken: "00"})
	if unknown.welcome.Resumed || unknown.welcome.Address == "Session:alice:gone" {
		t.Fatalf("unknown session: welcome %v, want a new session", unknown.welcome)
	}

	// Expired: detached longer than SessionBacklogAge, then swept.
	s.cancel()
	<-e.detached
	e.gw.sessions.sweep(time.Now().Add(e.gw.cfg.SessionBacklogAge + time.Second))
	if err := e.rt.Send(t.Context(), &grain.Message{To: s.welcome.Address, From: "Echo:alice:e"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("send to expired session: %v, want NotFound", err)
	}
	renewed := e.open(t, &agentsilov1.Hello{Principal: "alice", ResumeAddress: s.welcome.Address, ResumeToken: s.welcome.ResumeToken})
	if renewed.welcome.Resumed || renewed.welcome.Address == s.welcome.Address {
		t.Fatalf("expired session: welcome %v, want a new session", renewed.welcome)
	}
}

func TestBacklogBound(t *testing.T) {
	e := startGateway(t, func(c *Config) { c.SessionBacklog = 2 })
	s := e.open(t, &agentsilov1.Hello{})
	s.cancel()
	<-e.detached
	send := func() error {
		return e.rt.Send(t.Context(), &grain.Message{To: s.welcome.Address, From: "Echo:dev:e", Message: "x"})
	}
	for range 2 {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(); !errors.Is(err, errs.ErrResourceExhausted) {
		t.Fatalf("send past the backlog: %v, want ResourceExhausted", err)
	}
}

func TestCallErrors(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	req := func(to, typ string) *agentsilov1.Result {
		r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: to, MessageType: typ, Kind: agentsilov1.Kind_KIND_REQUEST}, 0))
		return r
	}
	for _, c := range []struct {
		name, to, typ string
		want          codes.Code
	}{
		{"unknown type", "Nope:dev:x", "", codes.NotFound},
		{"malformed address", "no-colon", "", codes.InvalidArgument},
		{"bad owner", "Echo:-x:y", "", codes.InvalidArgument},
		{"reserved type", "Echo:dev:x", "_silo.stop", codes.InvalidArgument},
		{"handler error", "Fail:dev:x", "", codes.FailedPrecondition},
		{"handler panic", "Panic:dev:x", "", codes.Internal},
		{"ask a session", s.welcome.Address, "", codes.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) { wantCode(t, req(c.to, c.typ), c.want) })
	}
	// The gateway (and the agent type that panicked) keep serving.
	wantText(t, s.ask("Echo:dev:x", "still here"), "still here")
	r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Echo:dev:x"}, 0))
	wantCode(t, r, codes.InvalidArgument) // no kind
	r, _ = s.result(s.call(nil, 0))
	wantCode(t, r, codes.InvalidArgument)

	// Unary calls carry the same codes.
	_, err := e.cli.Ask(t.Context(), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Nope:x"}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unary Ask of an unknown type: %v, want NotFound", err)
	}
}

func TestDeadline(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Slow:dev:x", Message: "wait", Kind: agentsilov1.Kind_KIND_REQUEST}, 10))
	wantCode(t, r, codes.DeadlineExceeded)
	<-e.cancelled // the agent saw its context end
}

func TestOversize(t *testing.T) {
	e := startGateway(t, func(c *Config) { c.MaxMessageSize = 16 << 10 })
	s := e.open(t, &agentsilov1.Hello{})
	big := strings.Repeat("x", 17<<10)
	wantCode(t, s.ask("Echo:dev:x", big), codes.ResourceExhausted)
	wantText(t, s.ask("Echo:dev:x", "small"), "small")
	_, err := e.cli.Send(t.Context(), &agentsilov1.SendRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x", Message: big}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("unary Send oversize: %v, want ResourceExhausted", err)
	}
}

func TestCancelFrame(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	id := s.call(&agentsilov1.AgentMessage{To: "Slow:dev:x", Message: "c", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	<-e.started
	if err := s.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Cancel{Cancel: &agentsilov1.Cancel{CallId: id}}}); err != nil {
		t.Fatal(err)
	}
	<-e.cancelled
	r, _ := s.result(id)
	wantCode(t, r, codes.Canceled)
}

func TestClientDisconnectMidCall(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	s.call(&agentsilov1.AgentMessage{To: "Slow:dev:x", Message: "gone", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	s.call(&agentsilov1.AgentMessage{To: "Slow:dev:y", Message: "gone too", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	<-e.started
	<-e.started
	s.cancel()
	<-e.cancelled
	<-e.cancelled
	<-e.detached
	// goleak (in startGateway's cleanup) checks that nothing is left behind.
}

func TestHalfCloseFinishesCalls(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	id := s.call(&agentsilov1.AgentMessage{To: "Echo:dev:x", Message: "last", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	r, _ := s.result(id)
	wantText(t, r, "last")
	if _, err := s.stream.Recv(); err != io.EOF {
		t.Fatalf("after the last result: %v, want EOF", err)
	}
}

func TestSendAndEvent(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	for _, k := range []agentsilov1.Kind{agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT} {
		r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Echo:dev:x", Kind: k}, 0))
		if r.Error != nil || r.Message.GetId() == "" {
			t.Fatalf("%v: %v", k, r)
		}
	}
	r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Nope:dev:x", Kind: agentsilov1.Kind_KIND_ONE_WAY}, 0))
	wantCode(t, r, codes.NotFound)
	resp, err := e.cli.Send(t.Context(), &agentsilov1.SendRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x"}})
	if err != nil || resp.Id == "" {
		t.Fatalf("unary Send: %v, %v", resp, err)
	}
}

func TestCreateAndList(t *testing.T) {
	e := startGateway(t, nil)
	ctx := metadata.AppendToOutgoingContext(t.Context(), protocol.PrincipalHeader, "alice")
	c, err := e.cli.CreateAgent(ctx, &agentsilov1.CreateAgentRequest{Address: "Echo:cfg", Config: map[string]string{"k": "v"}})
	if err != nil || c.Address != "Echo:alice:cfg" {
		t.Fatalf("CreateAgent: %v, %v", c, err)
	}
	if _, err := e.cli.CreateAgent(ctx, &agentsilov1.CreateAgentRequest{Address: "Nope:x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("CreateAgent of an unknown type: %v, want NotFound", err)
	}
	for _, to := range []string{"Echo:a", "Echo:b", "Who:c"} {
		if _, err := e.cli.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: to}}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.cli.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: "Echo"})
	if err != nil || len(l.Agents) != 2 {
		t.Fatalf("ListAgents: %v, %v", l, err)
	}
	for _, a := range l.Agents {
		if !strings.HasPrefix(a.Address, "Echo:alice:") || a.Silo != "test-silo" || a.ActivatedAt == nil {
			t.Fatalf("activation %v", a)
		}
	}
	m, err := e.cli.ListMembers(ctx, &agentsilov1.ListMembersRequest{})
	if err != nil || len(m.Members) != 1 || m.Version != 1 {
		t.Fatalf("ListMembers: %v, %v", m, err)
	}
	if got := m.Members[0]; got.Name != "test-silo" || !got.Self || got.State != "alive" || got.Activations != 3 ||
		got.GatewayAddr != e.conn.Target() || got.PeerAddr != "" {
		t.Fatalf("member %v", got)
	}
}

func TestHealth(t *testing.T) {
	e := startGateway(t, nil)
	h := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", agentsilov1.Gateway_ServiceDesc.ServiceName} {
		r, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v, %v", svc, r, err)
		}
	}
	e.gw.GracefulStop()
	r, err := e.gw.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after GracefulStop: %v, %v", r, err)
	}
}

func TestGracefulStopFinishesCalls(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{})
	id := s.call(&agentsilov1.AgentMessage{To: "Slow:dev:x", Message: "finish me", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	<-e.started
	stopped := make(chan struct{})
	go func() {
		e.gw.GracefulStop()
		close(stopped)
	}()
	close(e.release)
	r, _ := s.result(id)
	wantText(t, r, "released")
	<-stopped
	if _, err := s.stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("session after GracefulStop: %v, want Unavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"127.0.0.1:7070", false, true},
		{"localhost:7070", false, true},
		{"[::1]:7070", false, true},
		{"0.0.0.0:7070", false, false},
		{":7070", false, false},
		{"10.1.2.3:7070", false, false},
		{"0.0.0.0:7070", true, true},
		{"nonsense", false, false},
	} {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Insecure = c.addr, c.insecure
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%q, insecure=%v) = %v, want ok=%v", c.addr, c.insecure, err, c.ok)
		}
	}
	cfg := DefaultConfig()
	cfg.SessionBacklog = 0
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepts SessionBacklog 0")
	}
}

// TestDisconnectRightAfterAFrame: a frame read as the client goes away must
// not leave the session's handler waiting (the reader gives up on handing
// it over once the stream's context ends). Repeated, since it is a race.
func TestDisconnectRightAfterAFrame(t *testing.T) {
	e := startGateway(t, nil)
	for range 50 {
		s := e.open(t, &agentsilov1.Hello{})
		if err := s.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Cancel{Cancel: &agentsilov1.Cancel{CallId: 1}}}); err != nil {
			t.Fatal(err)
		}
		s.cancel()
		<-e.detached
	}
}

// TestKindChecked: every entry point refuses a message kind it does not
// send, unary Ask and Send as a session Call does, and takes an unset one as
// its own.
func TestKindChecked(t *testing.T) {
	var broadcasts []agentsilov1.Kind
	e := startGateway(t, func(c *Config) {
		c.Broadcast = func(_ context.Context, _ string, m *agentsilov1.AgentMessage) (int, error) {
			broadcasts = append(broadcasts, m.GetKind())
			return 1, nil
		}
	})
	s := e.open(t, &agentsilov1.Hello{})
	tc := agentsilov1.NewTopicsClient(e.conn)
	for _, k := range []agentsilov1.Kind{99, -5, agentsilov1.Kind_KIND_RESPONSE, agentsilov1.Kind_KIND_EVENT, agentsilov1.Kind_KIND_ONE_WAY} {
		t.Run(fmt.Sprint("Ask ", k), func(t *testing.T) {
			_, err := e.cli.Ask(t.Context(), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x", Kind: k}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "kind") {
				t.Fatalf("unary Ask of kind %v: %v, want InvalidArgument naming the kind", k, err)
			}
		})
	}
	for _, k := range []agentsilov1.Kind{99, -5, agentsilov1.Kind_KIND_RESPONSE, agentsilov1.Kind_KIND_REQUEST} {
		t.Run(fmt.Sprint("Send ", k), func(t *testing.T) {
			_, err := e.cli.Send(t.Context(), &agentsilov1.SendRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x", Kind: k}})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("unary Send of kind %v: %v, want InvalidArgument", k, err)
			}
			_, err = tc.Broadcast(t.Context(), &agentsilov1.BroadcastRequest{Pattern: "Echo:dev:*", Message: &agentsilov1.AgentMessage{Kind: k}})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Broadcast of kind %v: %v, want InvalidArgument", k, err)
			}
		})
	}
	for _, k := range []agentsilov1.Kind{99, -5, agentsilov1.Kind_KIND_RESPONSE, agentsilov1.Kind_KIND_UNSPECIFIED} {
		r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Echo:dev:x", Kind: k}, 0))
		wantCode(t, r, codes.InvalidArgument)
	}
	// The kinds each entry point sends, and none, are served.
	for _, k := range []agentsilov1.Kind{agentsilov1.Kind_KIND_UNSPECIFIED, agentsilov1.Kind_KIND_REQUEST} {
		r, err := e.cli.Ask(t.Context(), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x", Message: "ok", Kind: k}})
		if err != nil || r.GetMessage().GetMessage() != "ok" {
			t.Fatalf("unary Ask of kind %v: %v, %v", k, r, err)
		}
	}
	for _, k := range []agentsilov1.Kind{agentsilov1.Kind_KIND_UNSPECIFIED, agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT} {
		if r, err := e.cli.Send(t.Context(), &agentsilov1.SendRequest{Message: &agentsilov1.AgentMessage{To: "Echo:x", Kind: k}}); err != nil || r.GetId() == "" {
			t.Fatalf("unary Send of kind %v: %v, %v", k, r, err)
		}
		if _, err := tc.Broadcast(t.Context(), &agentsilov1.BroadcastRequest{Pattern: "Echo:dev:*", Message: &agentsilov1.AgentMessage{Kind: k}}); err != nil {
			t.Fatalf("Broadcast of kind %v: %v", k, err)
		}
	}
	if len(broadcasts) != 3 {
		t.Fatalf("%d broadcasts reached the cluster, want the 3 of good kinds", len(broadcasts))
	}
}

// TestHelloTwice: a second Hello on a session's stream ends the stream with
// InvalidArgument, after the call in flight has run to its end and its
// result is written; the session stays, and a new stream resumes it and is
// served at once.
func TestHelloTwice(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	id := s.call(&agentsilov1.AgentMessage{To: "Slow:alice:x", Message: "in flight", Kind: agentsilov1.Kind_KIND_REQUEST}, 0)
	<-e.started
	if err := s.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: &agentsilov1.Hello{Principal: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	close(e.release)
	f, err := s.stream.Recv()
	if err != nil || f.GetResult().GetCallId() != id {
		t.Fatalf("after a second Hello: %v, %v; want the result of the call in flight", f, err)
	}
	wantText(t, f.GetResult(), "released")
	if _, err := s.stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "second Hello") {
		t.Fatalf("the stream ended with %v, want InvalidArgument naming the second Hello", err)
	}
	again := e.open(t, &agentsilov1.Hello{Principal: "alice", ResumeAddress: s.welcome.Address, ResumeToken: s.welcome.ResumeToken})
	if !again.welcome.Resumed {
		t.Fatalf("the session did not survive its stream: %v", again.welcome)
	}
	wantText(t, again.ask("Echo:alice:x", "next"), "next")
}

// A client's message is user-input unless it says lower; the reply of an
// agent handling it is agent-message, or lower as the message was; a
// client that claims system is refused with PermissionDenied (a label
// this version does not know, InvalidArgument), in a session and unary.
func TestClientLabels(t *testing.T) {
	e := startGateway(t, nil)
	s := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	for _, tc := range []struct {
		label, reply agentsilov1.ContentLabel
	}{
		{agentsilov1.ContentLabel_CONTENT_LABEL_UNSPECIFIED, agentsilov1.ContentLabel_CONTENT_LABEL_AGENT_MESSAGE},
		{agentsilov1.ContentLabel_CONTENT_LABEL_USER_INPUT, agentsilov1.ContentLabel_CONTENT_LABEL_AGENT_MESSAGE},
		{agentsilov1.ContentLabel_CONTENT_LABEL_TOOL_OUTPUT, agentsilov1.ContentLabel_CONTENT_LABEL_TOOL_OUTPUT},
	} {
		r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Echo:alice:one", Message: "hi", Kind: agentsilov1.Kind_KIND_REQUEST, Label: tc.label}, 0))
		if r.GetError() != nil || r.GetMessage().GetLabel() != tc.reply {
			t.Fatalf("a message labelled %v: reply %v, want labelled %v", tc.label, r, tc.reply)
		}
	}
	for label, code := range map[agentsilov1.ContentLabel]codes.Code{agentsilov1.ContentLabel_CONTENT_LABEL_SYSTEM: codes.PermissionDenied, 42: codes.InvalidArgument} {
		r, _ := s.result(s.call(&agentsilov1.AgentMessage{To: "Echo:alice:one", Message: "hi", Kind: agentsilov1.Kind_KIND_REQUEST, Label: label}, 0))
		wantCode(t, r, code)
		ctx := metadata.AppendToOutgoingContext(t.Context(), protocol.PrincipalHeader, "bob")
		if _, err := e.cli.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:one", Message: "hi", Label: label}}); status.Code(err) != code {
			t.Fatalf("unary Ask labelled %v: %v, want %v", label, err, code)
		}
	}
}
