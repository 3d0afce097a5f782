package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// waitFor waits until cond holds: a named condition, polled, for up to
// 45 s (testutil.WaitTimeout).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestSlowReaderIsBounded is the memory-exhaustion attack: one session
// sends 64 KiB Asks to Echo and never reads its stream. The gateway stops
// reading the stream once the session's results are over its budget, so
// the client's sends block (HTTP/2 flow control), and ends the stream with
// ResourceExhausted once the client has read nothing for StallTimeout. The
// heap (client and gateway, both in this process) stays under
// attackHeapBound meanwhile, and another principal is served throughout.
// Before the limits, the gateway took every call and queued every result:
// the attacker's 4,000 calls (256 MiB) all went through.
func TestSlowReaderIsBounded(t *testing.T) {
	const (
		calls           = 4000
		attackHeapBound = 64 << 20
	)
	stalled := make(chan string, 1)
	var heapAtEnd atomic.Uint64
	ended := make(chan struct{})
	e := startGateway(t, func(c *Config) { c.Limits.StallTimeout = 2 * time.Second })
	e.gw.testHookStalled = func(addr string) {
		select {
		case stalled <- addr:
		default:
		}
	}
	e.gw.testHookStallEnd = func(string) {
		// The peak: everything the attack made the gateway hold is still
		// held, and the client's sends have been blocked for StallTimeout.
		heapAtEnd.Store(heapInUse())
		close(ended)
	}
	base := heapInUse()

	// The attacker has a connection of its own, which the gateway closes
	// in the end.
	conn, err := grpc.NewClient(e.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	attacker := (&testEnv{cli: agentsilov1.NewGatewayClient(conn)}).open(t, &agentsilov1.Hello{Principal: "mallory"})
	payload := strings.Repeat("x", 64<<10)
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		for i := range calls {
			err := attacker.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Call{Call: &agentsilov1.Call{
				CallId:  uint64(i + 1),
				Message: &agentsilov1.AgentMessage{To: "Echo:mallory:e", Message: payload, Kind: agentsilov1.Kind_KIND_REQUEST},
			}}})
			if err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
		sendErr <- nil
	}()

	select {
	case <-stalled:
	case err := <-sendErr:
		t.Fatalf("the gateway took all %d calls of a client that reads nothing (send error %v)", sent.Load(), err)
	}
	// Another principal is served while the attacker is held back.
	other := e.open(t, &agentsilov1.Hello{Principal: "bob"})
	wantText(t, other.ask("Echo:bob:e", "still served"), "still served")
	if _, err := e.cli.Ask(withPrincipal(t.Context(), "bob"), askReq("Echo:e", "unary too")); err != nil {
		t.Fatalf("unary Ask of another principal: %v", err)
	}

	<-ended
	// A client that reads again gets the results written so far, then the
	// stream's status; its sends fail.
	for err == nil {
		_, err = attacker.stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("attacker's stream ended with %v, want ResourceExhausted", err)
	}
	if err := <-sendErr; err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("attacker's Send: %v, want io.EOF once the stream ended", err)
	}
	grew := int64(heapAtEnd.Load()) - int64(base)
	t.Logf("attacker sent %d of %d calls; heap grew by %.1f MiB under attack (bound %d MiB)", sent.Load(), calls, float64(grew)/(1<<20), attackHeapBound>>20)
	if grew > attackHeapBound {
		t.Errorf("heap grew by %d bytes under the attack, over the bound of %d", grew, attackHeapBound)
	}
	if sent.Load() >= calls {
		t.Errorf("all %d calls were sent", calls)
	}
	// The gateway serves on, the attacker's principal too.
	wantText(t, e.open(t, &agentsilov1.Hello{Principal: "mallory"}).ask("Echo:mallory:e", "after"), "after")
}

// withPrincipal declares p on unary calls (a gateway without authentication).
func withPrincipal(ctx context.Context, p string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, protocol.PrincipalHeader, p)
}

// TestSessionsPerPrincipal is the session-flood attack: one principal opens
// many sessions. Past MaxSessionsPerPrincipal attached sessions, a new one
// is refused with ResourceExhausted (and the heap does not grow with the
// attempts); another principal still gets sessions; a session detached
// (and kept for re-attaching) makes room for a new one.
func TestSessionsPerPrincipal(t *testing.T) {
	const limit, attempts = 20, 2000
	e := startGateway(t, func(c *Config) { c.Limits.MaxSessionsPerPrincipal = limit })
	var held []*testSession
	for range limit {
		held = append(held, e.open(t, &agentsilov1.Hello{Principal: "mallory"}))
	}
	base := heapInUse()
	refused := 0
	for range attempts {
		s := e.dial(t, &agentsilov1.Hello{Principal: "mallory"})
		_, err := s.stream.Recv()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("session %d of one principal: %v, want ResourceExhausted", limit+refused+1, err)
		}
		refused++
		s.cancel()
	}
	grew := int64(heapInUse()) - int64(base)
	t.Logf("%d sessions refused; heap grew by %.1f MiB", refused, float64(grew)/(1<<20))
	if grew > 16<<20 {
		t.Errorf("heap grew by %d bytes over %d refused sessions", grew, attempts)
	}
	wantText(t, e.open(t, &agentsilov1.Hello{Principal: "bob"}).ask("Echo:bob:e", "hi"), "hi")

	// A detached session gives its place to a new one, which forgets it:
	// the one detached longest goes first.
	for _, s := range held[:2] {
		s.cancel()
		<-e.detached
	}
	wantText(t, e.open(t, &agentsilov1.Hello{Principal: "mallory"}).ask("Echo:mallory:e", "hi"), "hi")
	gone := held[0]
	again := e.open(t, &agentsilov1.Hello{Principal: "mallory", ResumeAddress: gone.welcome.Address, ResumeToken: gone.welcome.ResumeToken})
	if again.welcome.Resumed {
		t.Fatalf("resumed a session that was replaced")
	}
}

// TestNoHello: a session stream that never sends its Hello is ended with
// DeadlineExceeded after HelloTimeout; with API keys, a principal's streams
// awaiting their Hello are bounded like its sessions.
func TestNoHello(t *testing.T) {
	e := startGateway(t, func(c *Config) {
		c.Limits.HelloTimeout = 50 * time.Millisecond
	})
	stream, err := e.cli.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a stream without Hello: %v, want DeadlineExceeded", err)
	}

	const limit = 3
	e = startGateway(t, func(c *Config) {
		c.Auth.Keys = testKeys
		c.Limits.MaxSessionsPerPrincipal = limit
	})
	ctx, cancel := context.WithCancel(withKey(t.Context(), "alice-key"))
	defer cancel()
	for range limit {
		if _, err := e.cli.Session(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three streams awaiting their Hello", func() bool {
		e.gw.principals.mu.Lock()
		defer e.gw.principals.mu.Unlock()
		u := e.gw.principals.m["alice"]
		return u != nil && u.hellos == limit
	})
	stream, err = e.cli.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream awaiting its Hello: %v, want ResourceExhausted", err)
	}
	wantText(t, openWith(t, e, withKey(t.Context(), "bob-key"), &agentsilov1.Hello{}).ask("Echo:e", "hi"), "hi")
}

// TestCallsPerPrincipal: past MaxCallsPerPrincipal calls in flight, a
// principal's calls fail at once with ResourceExhausted, on sessions and
// unary; other principals are served.
func TestCallsPerPrincipal(t *testing.T) {
	const limit = 2
	e := startGateway(t, func(c *Config) { c.Limits.MaxCallsPerPrincipal = limit })
	s := e.open(t, &agentsilov1.Hello{Principal: "mallory"})
	var ids []uint64
	for i := range limit {
		ids = append(ids, s.call(&agentsilov1.AgentMessage{To: fmt.Sprintf("Slow:mallory:s%d", i), Message: "hold", Kind: agentsilov1.Kind_KIND_REQUEST}, 0))
		<-e.started
	}
	r := s.ask("Echo:mallory:e", "one too many")
	wantCode(t, r, codes.ResourceExhausted)
	if _, err := e.cli.Ask(withPrincipal(t.Context(), "mallory"), askReq("Echo:e", "unary")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("unary call past the limit: %v, want ResourceExhausted", err)
	}
	wantText(t, e.open(t, &agentsilov1.Hello{Principal: "bob"}).ask("Echo:bob:e", "hi"), "hi")
	close(e.release)
	for range ids {
		r := s.recv().GetResult()
		wantText(t, r, "released")
	}
	wantText(t, s.ask("Echo:mallory:e", "room again"), "room again")
}

func TestLimitsValidate(t *testing.T) {
	for name, change := range map[string]func(*Limits){
		"HelloTimeout":            func(l *Limits) { l.HelloTimeout = 0 },
		"MaxSessionsPerPrincipal": func(l *Limits) { l.MaxSessionsPerPrincipal = 0 },
		"MaxCallsPerPrincipal":    func(l *Limits) { l.MaxCallsPerPrincipal = 0 },
		"SessionPending":          func(l *Limits) { l.SessionPending = 0 },
		"SessionPendingBytes":     func(l *Limits) { l.SessionPendingBytes = 0 },
		"SessionBacklogBytes":     func(l *Limits) { l.SessionBacklogBytes = 0 },
		"StallTimeout":            func(l *Limits) { l.StallTimeout = -time.Second },
	} {
		cfg := DefaultConfig()
		change(&cfg.Limits)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate with a bad %s: %v", name, err)
		}
	}
}

// TestSessionCapWhileOpening: a session made but not attached yet is not
// replaced to make room for another of its principal's (it would then be
// attached anyway, uncounted, and serve past the limit): at the limit, with
// one session still opening, the next is refused.
func TestSessionCapWhileOpening(t *testing.T) {
	const limit = 3
	e := startGateway(t, func(c *Config) { c.Limits.MaxSessionsPerPrincipal = limit })
	reached, release := make(chan string, 1), make(chan struct{})
	var first, released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	hook := func(addr string) {
		held := false
		first.Do(func() { held = true })
		if held {
			reached <- addr
			<-release
		}
	}
	e.onOpened.Store(&hook)
	mallory := &agentsilov1.Hello{Principal: "mallory"}
	slow := e.dial(t, mallory)
	<-reached // its session is made, and not attached yet
	serving := []*testSession{}
	for range limit - 1 {
		serving = append(serving, e.open(t, mallory))
	}
	late := e.dial(t, mallory)
	f, err := late.stream.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("session %d of one principal while one is opening: %v, %v; want ResourceExhausted", limit+1, f, err)
	}
	released.Do(func() { close(release) })
	f, err = slow.stream.Recv()
	if err != nil || f.GetWelcome() == nil {
		t.Fatalf("the session opening: %v, %v; want its Welcome", f, err)
	}
	slow.welcome = f.GetWelcome()
	for _, s := range append(serving, slow) {
		wantText(t, s.ask("Echo:mallory:e", "hi"), "hi")
	}
}
