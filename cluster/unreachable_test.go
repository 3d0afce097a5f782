package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A member that the others cannot reach on its peer port (its listener
// closed: it still renews its lease and gossips) is not given work: the
// others report it, it marks itself unreachable and drains, and then the
// agents it owned, and new ones, are placed on the others, and Asks to
// them succeed through every reachable gateway. `members` and its /readyz
// say it is unreachable; `members` lists it without asking it for its
// count (its peer port now takes connections and never answers, so an
// Ask would wait for the call's end).
func TestUnreachableMemberGetsNoWork(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	configure := func(_ *SiloConfig, reg *grain.Registry) {
		if err := reg.Register("Echo", func(grain.Host) (grain.Agent, error) {
			return agentFunc(func(_ context.Context, m *grain.Message) (*grain.Message, error) { return m.Response(), nil }), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	a := c.startWith("a", configure)
	b := c.startWith("b", configure)
	s := c.startWith("c", configure)
	c.waitView("a", "b", "c")

	// Agents of c's share in the view of three: one active on c, the rest
	// new.
	var owned []string
	for i := 0; len(owned) < 6; i++ {
		addr := fmt.Sprintf("Echo:alice:x%d", i)
		if Owner(addr, []string{"a", "b", "c"}) == "c" {
			owned = append(owned, addr)
		}
	}
	dial := func(s *Silo) *client.Client {
		cl, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("alice"))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ca, cb := dial(a), dial(b)
	defer ca.Close()
	defer cb.Close()
	if _, err := ca.Ask(t.Context(), owned[0], grain.Text("before")); err != nil {
		t.Fatal(err)
	}
	if s.rt.Len() != 1 {
		t.Fatalf("c holds %d activations, want 1", s.rt.Len())
	}

	// c's peer port stops answering: its listener closes, and the others'
	// streams to it go.
	peerAddr := s.members.Self().PeerAddr
	s.peerLis.Close()
	a.tp.ClosePeer(peerAddr)
	b.tp.ClosePeer(peerAddr)
	// (The closed listener is c's first failure on Err: taken here, so
	// that what c says once drained can be read below.)
	select {
	case <-s.Err():
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("c's closed peer listener reported nothing on Err")
	}

	// A call routed to c is not delivered: a probes c, reports it, b
	// follows, and c marks itself unreachable and drains.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, _ = ca.Ask(ctx, owned[1], grain.Text("to c"))
	cancel()
	waitFor(t, "c unreachable and drained in every view", func() bool {
		for _, x := range []*Silo{a, b, s} {
			mi, ok := x.router.state.Load().view.Member("c")
			if !ok || !mi.Unreachable || !mi.Drained {
				return false
			}
		}
		return true
	})
	if n := s.rt.Len(); n != 0 {
		t.Errorf("drained c holds %d activations", n)
	}
	// c says so on Err, where Main learns to close it and start it again.
	select {
	case err := <-s.Err():
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("c's Err: %v, want ErrUnreachable", err)
		}
	case <-time.After(testutil.WaitTimeout):
		t.Error("c drained but reported nothing on Err")
	}

	// Every agent of c's share, the one it held and the new ones, answers
	// through a's and b's gateways, from a or b.
	for i, addr := range owned {
		cl := ca
		if i%2 == 1 {
			cl = cb
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := cl.Ask(ctx, addr, grain.Text("after"))
		cancel()
		if err != nil {
			t.Errorf("Ask %s after c drained: %v", addr, err)
		}
		if owner := a.router.Route(addr); owner != "" && owner != "b" {
			t.Errorf("%s routed to %q by a", addr, owner)
		}
	}
	if got := a.rt.Len() + b.rt.Len(); got != len(owned) {
		t.Errorf("a and b hold %d activations, want %d", got, len(owned))
	}
	if n := s.rt.Len(); n != 0 {
		t.Errorf("c holds %d activations after the calls", n)
	}

	// c's peer address takes connections and answers nothing: a request
	// to it would wait for its deadline.
	stopHole := blackHole(t, peerAddr)
	defer stopHole()

	// members, asked anywhere, says c is unreachable, with no error: c is
	// not asked for its count; c is not ready.
	for _, x := range []*Silo{a, s} {
		ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitTimeout)
		ms, _, err := clusterInfo{r: x.router, rt: x.rt}.Members(ctx)
		cancel()
		if err != nil {
			t.Errorf("members on %s: %v", x.cfg.Name, err)
		}
		var state string
		for _, m := range ms {
			if m.GetName() == "c" {
				state = m.GetState()
				if m.GetActivations() != 0 {
					t.Errorf("members on %s counts %d activations on drained c", x.cfg.Name, m.GetActivations())
				}
			}
		}
		if !strings.HasPrefix(state, "unreachable") {
			t.Errorf("members on %s says c is %q, want unreachable", x.cfg.Name, state)
		}
	}
	// agents and types do not ask c either: it runs no agents, and the
	// others' types are the cluster's.
	info := clusterInfo{r: a.router, rt: a.rt}
	ctx, cancel = context.WithTimeout(t.Context(), testutil.WaitTimeout)
	agents, err := info.Agents(ctx, "")
	if err != nil || len(agents) != a.rt.Len()+b.rt.Len() {
		t.Errorf("agents on a with c unreachable: %d, %v; want a's and b's %d", len(agents), err, a.rt.Len()+b.rt.Len())
	}
	if types, err := info.Types(ctx); err != nil || !slices.ContainsFunc(types, func(at *agentsilov1.AgentType) bool { return at.GetName() == "Probe" }) {
		t.Errorf("types on a with c unreachable: %v, %v", types, err)
	}
	cancel()
	// So does the SDK's Members, within its call's deadline.
	ctx, cancel = context.WithTimeout(t.Context(), testutil.WaitTimeout)
	ms, err := cb.Admin().Members(ctx)
	cancel()
	if err != nil {
		t.Errorf("client Members: %v", err)
	}
	if len(ms) != 3 {
		t.Errorf("client Members: %+v, want 3 members", ms)
	}
	for _, m := range ms {
		if m.Name == "c" && !strings.HasPrefix(m.State, "unreachable") {
			t.Errorf("client Members says c is %q, want unreachable", m.State)
		}
	}
	if why := s.notReady(); !strings.Contains(why, "unreachable") {
		t.Errorf("c's /readyz says %q, want unreachable", why)
	}
	if why := a.notReady(); why != "" {
		t.Errorf("a's /readyz says %q", why)
	}
	c.l.check(t)
}

// blackHole listens on addr, takes every connection and answers nothing,
// until the returned stop closes it all.
func blackHole(t *testing.T, addr string) (stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return func() {
		lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}
