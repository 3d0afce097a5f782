package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The session tests: a client session, its address and the
// pushes made to it survive the loss (kill -9) of its gateway's silo. The
// pushes come from the SessionPusher agent (cmd/silo, --journal), on
// another silo than the session's.

// pusherOn returns the address of a SessionPusher agent that the live
// silos place on none of avoid.
func pusherOn(c *testcluster.Cluster, avoid ...string) string {
	for i := 0; ; i++ {
		a := fmt.Sprintf("SessionPusher:%s:p%d", testcluster.Principal, i)
		owner := c.Owner(a)
		ok := true
		for _, s := range avoid {
			if owner == s {
				ok = false
			}
		}
		if ok {
			return a
		}
	}
}

// push asks the pusher to push count messages numbered from n to session,
// and returns how many it pushed and the code that stopped it.
func push(ctx context.Context, cl *client.Client, pusher, session string, n, count int) (int, codes.Code, error) {
	r, err := cl.Ask(ctx, pusher, &client.Message{Message: fmt.Sprintf("push %s %d %d", session, n, count)})
	if err != nil {
		return 0, codes.Unknown, err
	}
	f := strings.Fields(r.Message)
	if len(f) != 2 {
		return 0, codes.Unknown, fmt.Errorf("pusher answered %q", r.Message)
	}
	sent, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, codes.Unknown, err
	}
	code, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, codes.Unknown, fmt.Errorf("pusher answered %q: %w", r.Message, err)
	}
	return sent, codes.Code(code), nil
}

// rawSession is a Session stream opened by hand, to present a resume
// address and token as any client could.
type rawSession struct {
	stream  agentsilov1.Gateway_SessionClient
	cancel  context.CancelFunc
	welcome *agentsilov1.Welcome
}

// openRaw opens a Session stream on the gateway at addr with hello; the
// error is the stream's status if the gateway refused it.
func openRaw(t *testing.T, addr string, hello *agentsilov1.Hello) (*rawSession, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(t.Context())
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
		return nil, err
	}
	if f.GetWelcome() == nil {
		cancel()
		t.Fatalf("first frame %v, want a Welcome", f)
	}
	return &rawSession{stream: stream, cancel: cancel, welcome: f.GetWelcome()}, nil
}

// recvPushes reads n pushes from s and returns their texts.
func (s *rawSession) recvPushes(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		f, err := s.stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d pushes: %v", len(out), n, err)
		}
		if p := f.GetPush(); p != nil {
			out = append(out, p.GetMessage())
		}
	}
	return out
}

// seq returns the texts "from" .. "from+n-1".
func seq(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(from + i)
	}
	return out
}

// TestSessionSurvivesGatewayKill: a client (the SDK, dialled with every
// gateway) holds a session on silo 0; silo 0 is killed (-9) while an agent
// on another silo keeps pushing numbered messages to the session's
// address. The client re-attaches through another gateway with the same
// address and receives, in order and once each, every message whose push
// succeeded after the kill (the ones pushed while no gateway held the
// session included); the address then takes new pushes.
func TestSessionSurvivesGatewayKill(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	victim := c.Silo(0).Name
	cl := c.Client(t, 0, 1, 2)
	addr := cl.Address()
	if !strings.HasSuffix(addr, "@"+victim) {
		t.Fatalf("session %s: want it on %s", addr, victim)
	}
	pushers := c.Client(t, 1, 2)
	pusher := pusherOn(c, victim)

	var mu sync.Mutex
	var got []int
	var gotAt []time.Time
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for m := range cl.Messages() {
			n, err := strconv.Atoi(m.Message)
			if err != nil {
				t.Errorf("push %q: not a number", m.Message)
				continue
			}
			mu.Lock()
			got = append(got, n)
			gotAt = append(gotAt, time.Now())
			mu.Unlock()
		}
	}()
	received := func(n int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range got {
			if g == n {
				return true
			}
		}
		return false
	}
	ctx := t.Context()
	// Before the kill: the fast path.
	for n := 1; n <= 5; n++ {
		if sent, code, err := push(ctx, pushers, pusher, addr, n, 1); err != nil || sent != 1 {
			t.Fatalf("push %d before the kill: %d %v %v", n, sent, code, err)
		}
	}
	testutil.WaitFor(t, "the pushes before the kill", func() bool { return received(5) })

	c.Kill(0)
	killed := time.Now()
	type result struct {
		n    int
		ok   bool
		code codes.Code
		at   time.Time
	}
	var results []result
	n := 6
	pushOne := func() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sent, code, err := push(pctx, pushers, pusher, addr, n, 1)
		if err != nil {
			code = status.Code(err)
		}
		results = append(results, result{n: n, ok: err == nil && sent == 1, code: code, at: time.Now()})
		n++
	}
	// Push until the client has re-attached and received what was pushed
	// after the kill, then 20 more.
	var firstAfter int
	testutil.WaitFor(t, "the client receiving pushes made after the kill", func() bool {
		pushOne()
		for _, r := range results {
			if r.ok {
				if received(r.n) {
					firstAfter = r.n
					return true
				}
				break
			}
		}
		return false
	})
	for range 20 {
		pushOne()
	}
	last := results[len(results)-1]
	if !last.ok {
		t.Fatalf("push %d after the client re-attached: %v", last.n, last.code)
	}
	testutil.WaitFor(t, "the last push", func() bool { return received(last.n) })
	if a := cl.Address(); a != addr {
		t.Fatalf("address after failover %s, want %s", a, addr)
	}

	mu.Lock()
	defer mu.Unlock()
	// In order, none twice.
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("pushes received out of order or twice: ... %d then %d (all: %v)", got[i-1], got[i], got)
		}
	}
	have := make(map[int]bool, len(got))
	for _, g := range got {
		have[g] = true
	}
	okAfter, failed, kept := 0, map[codes.Code]int{}, 0
	var reattached time.Time
	for i, g := range got {
		if g == firstAfter {
			reattached = gotAt[i]
		}
	}
	for _, r := range results {
		if !r.ok {
			failed[r.code]++
			continue
		}
		okAfter++
		if !have[r.n] {
			t.Errorf("push %d succeeded after the kill (at +%v) but never reached the client", r.n, r.at.Sub(killed))
		}
		if r.at.Before(reattached) {
			kept++ // taken before the client received anything pushed after the kill
		}
	}
	t.Logf("after kill -9 of the session's silo: %d pushes succeeded (%d of them before the client received any), %d failed %v; all %d received in order, none twice; address kept: %s",
		okAfter, kept, len(results)-okAfter, failed, okAfter, addr)
	cl.Close()
	<-readDone
}

// TestSessionAdoption: what a fallback holder keeps for a session whose
// silo is dead, step by step, with Session streams opened by hand:
// pushes beyond the gateway's backlog bound fail at the sender with
// ResourceExhausted; another principal, or the right principal with a
// wrong token, cannot adopt the session; the right client adopts it
// through another gateway and gets the kept pushes in order, then new
// ones; and when the adopting silo dies in turn, the session is adopted
// again through the last silo (its fallback holder).
func TestSessionAdoption(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3})
	first, err := openRaw(t, c.Silo(0).GatewayAddr, &agentsilov1.Hello{Principal: testcluster.Principal})
	if err != nil {
		t.Fatal(err)
	}
	addr, token := first.welcome.GetAddress(), first.welcome.GetResumeToken()
	first.cancel()
	names := []string{c.Silo(1).Name, c.Silo(2).Name}
	holder := cluster.Owner(addr, names) // the fallback holder: silo 0 is in no fallback
	adopter := 1
	if c.Silo(1).Name == holder {
		adopter = 2
	}
	t.Logf("session %s: fallback holder %s, adopted through %s", addr, holder, c.Silo(adopter).Name)

	c.Kill(0)
	c.WaitGone(c.Silo(0).Name)
	pushers := c.Client(t, 1, 2)
	pusher := pusherOn(c)
	ctx := t.Context()
	const backlog = 1000 // gateway.DefaultConfig().SessionBacklog
	sent, code, err := push(ctx, pushers, pusher, addr, 1, backlog+5)
	if err != nil || sent != backlog || code != codes.ResourceExhausted {
		t.Fatalf("pushing %d to a session no silo holds: %d taken, stopped by %v, %v; want %d taken, then ResourceExhausted", backlog+5, sent, code, err, backlog)
	}

	// Another principal, and a wrong token, are refused.
	_, err = openRaw(t, c.Silo(adopter).GatewayAddr, &agentsilov1.Hello{Principal: "mallory", ResumeAddress: addr, ResumeToken: token})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another principal resuming %s: %v, want PermissionDenied", addr, err)
	}
	_, err = openRaw(t, c.Silo(adopter).GatewayAddr, &agentsilov1.Hello{Principal: testcluster.Principal, ResumeAddress: addr, ResumeToken: wrongToken(token)})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("resuming %s with a wrong token: %v, want PermissionDenied", addr, err)
	}

	// The owner adopts it, and gets what was kept, in order.
	s, err := openRaw(t, c.Silo(adopter).GatewayAddr, &agentsilov1.Hello{Principal: testcluster.Principal, ResumeAddress: addr, ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.welcome; w.GetAddress() != addr || !w.GetResumed() {
		t.Fatalf("adopting %s: Welcome %v", addr, w)
	}
	if got, want := s.recvPushes(t, backlog), seq(1, backlog); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("kept pushes: got %v..., want 1..%d in order", got[:min(len(got), 10)], backlog)
	}
	if sent, code, err := push(ctx, pushers, pusher, addr, 2001, 3); err != nil || sent != 3 {
		t.Fatalf("push to the adopted session: %d %v %v", sent, code, err)
	}
	if got := s.recvPushes(t, 3); strings.Join(got, ",") != "2001,2002,2003" {
		t.Fatalf("pushes after adoption: %v", got)
	}
	s.cancel()

	// The adopting silo dies too: the fallback holder keeps the session
	// again, and adopts it through its own gateway.
	c.Kill(adopter)
	c.WaitGone(c.Silo(adopter).Name)
	if sent, code, err := push(ctx, pushers, pusher, addr, 3001, 2); err != nil || sent != 2 {
		t.Fatalf("push while the adopter is dead: %d %v %v", sent, code, err)
	}
	last := 3 - adopter // the silo left
	s2, err := openRaw(t, c.Silo(last).GatewayAddr, &agentsilov1.Hello{Principal: testcluster.Principal, ResumeAddress: addr, ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if w := s2.welcome; w.GetAddress() != addr || !w.GetResumed() {
		t.Fatalf("adopting %s again: Welcome %v", addr, w)
	}
	if got := s2.recvPushes(t, 2); strings.Join(got, ",") != "3001,3002" {
		t.Fatalf("pushes kept after the adopter died: %v", got)
	}
	if sent, code, err := push(ctx, pushers, pusher, addr, 4001, 1); err != nil || sent != 1 {
		t.Fatalf("push after the second adoption: %d %v %v", sent, code, err)
	}
	if got := s2.recvPushes(t, 1); got[0] != "4001" {
		t.Fatalf("push after the second adoption: %v", got)
	}
	s2.cancel()
}

// wrongToken returns a token that differs from tok in its first character.
func wrongToken(tok string) string {
	if strings.HasPrefix(tok, "0") {
		return "1" + tok[1:]
	}
	return "0" + tok[1:]
}
