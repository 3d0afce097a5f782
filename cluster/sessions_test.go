package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestFallbackOf: a session's fallback holder is never the silo its
// address names, and is the same whether that silo is in the view or not.
func TestFallbackOf(t *testing.T) {
	view := func(names ...string) membership.View {
		v := membership.View{Version: 1}
		for _, n := range names {
			v.Members = append(v.Members, membership.Member{Name: n})
		}
		return v
	}
	with := view("a", "b", "c", "d")
	without := view("b", "c", "d")
	seen := map[string]int{}
	for i := range 200 {
		addr := fmt.Sprintf("Session:p:%04d@a", i)
		f := fallbackOf(addr, with)
		if f == "a" || f == "" {
			t.Fatalf("%s: fallback holder %q", addr, f)
		}
		if g := fallbackOf(addr, without); g != f {
			t.Fatalf("%s: fallback holder %s with its silo in the view, %s without", addr, f, g)
		}
		seen[f]++
	}
	if len(seen) != 3 {
		t.Fatalf("200 sessions' fallback holders: %v, want all of b, c, d", seen)
	}
	if f := fallbackOf("Session:p:x@a", view("a")); f != "" {
		t.Fatalf("fallback holder with the session's silo alone: %q", f)
	}
	if f := fallbackOf("Session:p:x", view("a", "b")); f != Owner("Session:p:x", []string{"a", "b"}) {
		t.Fatalf("a session naming no silo: %q", f)
	}
}

// openSession opens a Session stream on the gateway at addr; the error is
// the stream's status if the gateway refused it. cancel ends the stream and
// closes its connection.
func openSession(t *testing.T, addr string, hello *agentsilov1.Hello) (agentsilov1.Gateway_SessionClient, *agentsilov1.Welcome, context.CancelFunc, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancelCtx := context.WithCancel(t.Context())
	cancel := func() { cancelCtx(); conn.Close() }
	stream, err := agentsilov1.NewGatewayClient(conn).Session(ctx)
	if err == nil {
		err = stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: hello}})
	}
	var f *agentsilov1.ServerFrame
	if err == nil {
		f, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return stream, f.GetWelcome(), cancel, nil
}

func pushTo(ctx context.Context, s *Silo, addr, text string) error {
	return s.Runtime().Send(ctx, &grain.Message{To: addr, From: "Probe:alice:pusher", Message: text})
}

func recvTexts(t *testing.T, stream agentsilov1.Gateway_SessionClient, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		f, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d pushes: %v", len(out), n, err)
		}
		if p := f.GetPush(); p != nil {
			out = append(out, p.GetMessage())
		}
	}
	return out
}

// TestSessionRehomedAndRaced: with in-process silos on real etcd and
// transport. The fallback holder of a session leaves while the session's
// silo lives: the session registers with the new fallback holder. Then the
// session's silo leaves: pushes are kept by the new fallback holder. Two
// gateways race to adopt the session: one after the other (the second
// takes it from the first), or one alone (the other gets
// FailedPrecondition while the first is being handed the session); either
// way each kept push arrives once, in order, and a later push reaches the
// last adopter.
func TestSessionRehomedAndRaced(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	names := []string{"s1", "s2", "s3", "s4"}
	for _, n := range names {
		c.start(n)
	}
	c.waitView(names...)
	c.mu.Lock()
	s1 := c.silos["s1"]
	c.mu.Unlock()
	stream, w, cancel, err := openSession(t, s1.GatewayAddr(), &agentsilov1.Hello{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	addr, token := w.GetAddress(), w.GetResumeToken()
	_ = stream
	cancel()

	home := fallbackOf(addr, c.silos["s2"].router.state.Load().view)
	c.mu.Lock()
	if n := c.silos[home].sessions.keep.len(); n != 1 {
		c.mu.Unlock()
		t.Fatalf("fallback holder %s keeps %d sessions, want 1", home, n)
	}
	c.mu.Unlock()
	c.stop(home)
	var rest []string
	for _, n := range names {
		if n != home {
			rest = append(rest, n)
		}
	}
	c.waitView(rest...)
	home2 := fallbackOf(addr, c.silos["s1"].router.state.Load().view)
	waitFor(t, "the session registered with its new fallback holder "+home2, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.silos[home2].sessions.keep.len() == 1
	})

	// The session's silo leaves: its pushes are kept by home2.
	c.stop("s1")
	var others []string
	for _, n := range rest {
		if n != "s1" {
			others = append(others, n)
		}
	}
	c.waitView(others...)
	c.mu.Lock()
	sender := c.silos[others[0]]
	c.mu.Unlock()
	for i := 1; i <= 5; i++ {
		if err := pushTo(t.Context(), sender, addr, fmt.Sprint(i)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}

	// Two gateways race to adopt it.
	type outcome struct {
		silo   string
		stream agentsilov1.Gateway_SessionClient
		w      *agentsilov1.Welcome
		cancel context.CancelFunc
		err    error
	}
	outcomes := make(chan outcome, 2)
	var wg sync.WaitGroup
	for _, n := range others {
		c.mu.Lock()
		gw := c.silos[n].GatewayAddr()
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, w, cancel, err := openSession(t, gw, &agentsilov1.Hello{Principal: "alice", ResumeAddress: addr, ResumeToken: token})
			outcomes <- outcome{n, st, w, cancel, err}
		}()
	}
	wg.Wait()
	close(outcomes)
	// Each that adopted it gets pushes until the other takes the session
	// over: between them, the kept pushes arrive once each, in order on
	// each stream; the later push reaches the silo that holds the session
	// last.
	var mu sync.Mutex
	got := map[string][]string{}
	var readers sync.WaitGroup
	var cancels []context.CancelFunc
	for o := range outcomes {
		switch {
		case o.err == nil && o.w.GetResumed() && o.w.GetAddress() == addr:
			cancels = append(cancels, o.cancel)
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					f, err := o.stream.Recv()
					if err != nil {
						return
					}
					if p := f.GetPush(); p != nil {
						mu.Lock()
						got[o.silo] = append(got[o.silo], p.GetMessage())
						mu.Unlock()
					}
				}
			}()
		case o.err == nil:
			t.Fatalf("%s: Welcome %v", o.silo, o.w)
		case status.Code(o.err) != codes.FailedPrecondition:
			t.Fatalf("%s lost the race with %v, want FailedPrecondition", o.silo, o.err)
		}
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		readers.Wait()
	}()
	if len(cancels) == 0 {
		t.Fatalf("neither gateway adopted %s", addr)
	}
	c.mu.Lock()
	keep := c.silos[home2].sessions.keep
	c.mu.Unlock()
	keep.mu.Lock()
	last := keep.recs[addr].holder
	keep.mu.Unlock()
	if err := pushTo(t.Context(), sender, addr, "6"); err != nil {
		t.Fatalf("push after adoption: %v", err)
	}
	waitFor(t, "the pushes on the adopting streams", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, g := range got {
			n += len(g)
		}
		return n >= 6 && len(got[last]) > 0 && got[last][len(got[last])-1] == "6"
	})
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for silo, g := range got {
		for i, m := range g {
			seen[m]++
			if i > 0 && g[i-1] >= m {
				t.Fatalf("pushes on %s out of order: %v", silo, g)
			}
		}
	}
	if fmt.Sprint(seen) != "map[1:1 2:1 3:1 4:1 5:1 6:1]" {
		t.Fatalf("pushes received: %v, want 1 to 6 once each", got)
	}
	t.Logf("%d gateways adopted the session; pushes received: %v", len(cancels), got)
}

// TestSessionKeeperBounds: a fallback holder refuses registrations past its
// bound on records, refuses another principal's registration of a session,
// and forgets a record when the session's silo forgets the session (its
// backlog age passed). On the way, a live silo gives a session up to the
// gateway its client re-attached through, and takes it back.
func TestSessionKeeperBounds(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	age := func(cfg *SiloConfig, _ *grain.Registry) { cfg.Gateway.SessionBacklogAge = 300 * time.Millisecond }
	s1, s2 := c.startWith("s1", age), c.startWith("s2", age)
	c.waitView("s1", "s2")

	k := s2.sessions.keep
	var h [sha256.Size]byte
	k.mu.Lock()
	k.max = 2
	k.mu.Unlock()
	for i := range 2 {
		if err := k.register("s1", fmt.Sprintf("Session:bob:%d@s1", i), "bob", h[:]); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.register("s1", "Session:bob:2@s1", "bob", h[:]); errs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a registration past the bound: %v, want ResourceExhausted", err)
	}
	if err := k.register("s1", "Session:bob:0@s1", "carol", h[:]); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("registering bob's session as carol's: %v, want InvalidArgument", err)
	}
	if err := k.adopt(t.Context(), "s1", "Session:bob:0@s1", "carol", h[:]); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("adopting bob's session as carol: %v, want InvalidArgument", err)
	}
	k.forget("s1", "Session:bob:0@s1")
	k.forget("s1", "Session:bob:1@s1")
	k.mu.Lock()
	k.max = defaultMaxKeptSessions
	k.mu.Unlock()

	// A session whose holder is gone: its pushes are kept within the byte
	// bound (the first always fits), past it the sender gets
	// ResourceExhausted, and the record expires SessionBacklogAge after.
	const ghost = "Session:bob:ghost@gone"
	k.mu.Lock()
	k.recs[ghost] = &sessionRecord{principal: "bob", holder: "gone"}
	k.backlogBytes = 300
	k.mu.Unlock()
	big := strings.Repeat("x", 200)
	if err := k.deliver(t.Context(), &agentsilov1.AgentMessage{To: ghost, Message: big}); err != nil {
		t.Fatalf("first push kept: %v", err)
	}
	if err := k.deliver(t.Context(), &agentsilov1.AgentMessage{To: ghost, Message: big}); errs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a push past the byte bound: %v, want ResourceExhausted", err)
	}
	waitFor(t, "the record of a session whose holder is gone to expire", func() bool { return k.len() == 0 })
	if err := k.deliver(t.Context(), &agentsilov1.AgentMessage{To: ghost, Message: "late"}); errs.Code(err) != codes.NotFound {
		t.Fatalf("a push to an expired session: %v, want NotFound", err)
	}

	// A session opened on s1 is registered with s2, and forgotten there
	// when s1's gateway forgets it.
	_, w, cancel, err := openSession(t, s1.GatewayAddr(), &agentsilov1.Hello{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if n := k.len(); n != 1 {
		t.Fatalf("s2 keeps %d sessions, want 1", n)
	}
	cancel()
	// Once s1 has seen the stream end (a push written to the stream as it
	// broke would be lost with it, not queued), and while s1 lives,
	// another gateway adopts its session too (the client's stream to s1
	// broke, and it re-attached through s2): s1 gives it up, with what it
	// had queued, and the address reaches s2 from then on.
	waitFor(t, "s1 to see the client's stream end", func() bool {
		attached, ok := s1.sessions.keep.gw.Attached(w.GetAddress())
		return ok && !attached
	})
	if err := pushTo(t.Context(), s2, w.GetAddress(), "queued on s1"); err != nil {
		t.Fatal(err)
	}
	resume := &agentsilov1.Hello{Principal: "alice", ResumeAddress: w.GetAddress(), ResumeToken: w.GetResumeToken()}
	st2, w2, cancel2, err := openSession(t, s2.GatewayAddr(), resume)
	if err != nil || !w2.GetResumed() || w2.GetAddress() != w.GetAddress() {
		t.Fatalf("resuming s1's live session through s2: %v, %v", w2, err)
	}
	if err := pushTo(t.Context(), s1, w.GetAddress(), "after"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(recvTexts(t, st2, 2)); got != "[queued on s1 after]" {
		t.Fatalf("pushes on s2: %s", got)
	}
	cancel2()
	// And back through s1.
	st3, w3, cancel3, err := openSession(t, s1.GatewayAddr(), resume)
	if err != nil || !w3.GetResumed() || w3.GetAddress() != w.GetAddress() {
		t.Fatalf("resuming through s1 again: %v, %v", w3, err)
	}
	if err := pushTo(t.Context(), s2, w.GetAddress(), "back"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(recvTexts(t, st3, 1)); got != "[back]" {
		t.Fatalf("pushes on s1 again: %s", got)
	}
	cancel3()
	waitFor(t, "the expired session forgotten by its fallback holder", func() bool { return k.len() == 0 })
}

// FuzzFallbackOf: for any address, sessionSilo and fallbackOf do not
// panic, and the fallback holder is a member other than the silo the
// address names.
func FuzzFallbackOf(f *testing.F) {
	f.Add("Session:alice:0192@s1")
	f.Add("Session:alice:0192")
	f.Add("@:@")
	f.Add("")
	v := membership.View{Version: 1, Members: []membership.Member{{Name: "s1"}, {Name: "s2"}, {Name: "s3", Leaving: true}}}
	f.Fuzz(func(t *testing.T, addr string) {
		named := sessionSilo(addr)
		got := fallbackOf(addr, v)
		if got == named || got == "s3" || (got != "s1" && got != "s2") {
			t.Fatalf("fallbackOf(%q) = %q (names %q)", addr, got, named)
		}
		_ = homeName(homeID(got, v))
	})
}

// BenchmarkSessionPush measures a push from an agent's runtime on one
// silo to a client session on another (acknowledged: one round trip), with
// in-process silos on real etcd and transport; ask-remote, an Ask to an
// agent on the other silo in the same run, is the anchor. Compare the two
// as a ratio:
//
//	go test -run XXX -bench SessionPush -count 5 ./cluster/
func BenchmarkSessionPush(b *testing.B) {
	e := etcdtest.Start(b)
	defer e.Stop()
	start := func(name string) *Silo {
		return startBenchSilo(b, e.Endpoint(), "/b", name, "Echo", func(grain.Host) (grain.Agent, error) {
			return agentFunc(func(_ context.Context, m *grain.Message) (*grain.Message, error) { return m.Response(), nil }), nil
		})
	}
	s1, s2 := start("s1"), start("s2")
	viewWait := testutil.WaitContext(b)
	for len(s1.router.state.Load().owners) != 2 || len(s2.router.state.Load().owners) != 2 {
		select {
		case <-viewWait.Done():
			b.Fatal("no view of two silos")
		case <-time.After(10 * time.Millisecond):
		}
	}
	conn, err := grpc.NewClient(s1.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	stream, err := agentsilov1.NewGatewayClient(conn).Session(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: &agentsilov1.Hello{Principal: "alice"}}}); err != nil {
		b.Fatal(err)
	}
	f, err := stream.Recv()
	if err != nil {
		b.Fatal(err)
	}
	addr := f.GetWelcome().GetAddress()
	go func() { // the client reads what is pushed
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	var remote string
	for i := 0; remote == ""; i++ {
		if a := fmt.Sprintf("Echo:alice:e%d", i); Owner(a, []string{"s1", "s2"}) == "s1" {
			remote = a
		}
	}
	b.Run("push-remote-session", func(b *testing.B) {
		for b.Loop() {
			if err := s2.Runtime().Send(b.Context(), &grain.Message{To: addr, From: "Echo:alice:x", Message: "p"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ask-remote", func(b *testing.B) {
		for b.Loop() {
			if _, err := s2.Runtime().Ask(b.Context(), &grain.Message{To: remote, From: "Echo:alice:x", Message: "p"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
