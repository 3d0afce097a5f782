package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// liveness counts the live activations of each address across every silo of
// an in-process cluster, from the start of OnActivate to the end of
// OnDeactivate, and records any moment at which an address had two.
type liveness struct {
	blocked  chan struct{} // a "block" message has started its turn
	unblock  chan struct{} // closing it ends the turns of "block" messages
	mu       sync.Mutex
	live     map[string]int
	overlaps []string
	started  atomic.Int64
}

func newLiveness() *liveness {
	return &liveness{live: make(map[string]int), blocked: make(chan struct{}, 1), unblock: make(chan struct{})}
}

func (l *liveness) register(t *testing.T, reg *grain.Registry, silo string) {
	t.Helper()
	err := reg.Register("Probe", func(h grain.Host) (grain.Agent, error) {
		return &probe{l: l, h: h, silo: silo}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (l *liveness) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.overlaps) > 0 {
		t.Fatalf("two live activations of one address: %v", l.overlaps)
	}
}

type probe struct {
	l    *liveness
	h    grain.Host
	silo string
}

func (p *probe) OnActivate(context.Context) error {
	p.l.started.Add(1)
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	key := p.h.Address().String()
	p.l.live[key]++
	if p.l.live[key] > 1 {
		p.l.overlaps = append(p.l.overlaps, key+" on "+p.silo)
	}
	return nil
}

func (p *probe) OnDeactivate(context.Context, grain.Reason) {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.l.live[p.h.Address().String()]--
}

func (p *probe) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Message == "block" {
		p.l.blocked <- struct{}{}
		<-p.l.unblock
	}
	r := m.Response()
	r.Message = p.silo
	return r, nil
}

type testCluster struct {
	t     *testing.T
	etcd  *etcdtest.Server
	l     *liveness
	mu    sync.Mutex
	silos map[string]*Silo
}

func newTestCluster(t *testing.T) *testCluster {
	c := &testCluster{t: t, etcd: etcdtest.Start(t), l: newLiveness(), silos: make(map[string]*Silo)}
	return c
}

func (c *testCluster) start(name string) *Silo { return c.startWith(name, nil) }

// startWith starts a silo whose config and registry configure adjusts.
func (c *testCluster) startWith(name string, configure func(*SiloConfig, *grain.Registry)) *Silo {
	t := c.t
	t.Helper()
	reg := grain.NewRegistry()
	c.l.register(t, reg, name)
	cfg := DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{c.etcd.Endpoint()}, Prefix: "/t"}
	cfg.Logger = testLogger()
	if configure != nil {
		configure(&cfg, reg)
	}
	s, err := NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	c.mu.Lock()
	c.silos[name] = s
	c.mu.Unlock()
	return s
}

func (c *testCluster) stop(name string) {
	c.t.Helper()
	c.mu.Lock()
	s := c.silos[name]
	delete(c.silos, name)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		c.t.Errorf("close %s: %v", name, err)
	}
}

func (c *testCluster) close() {
	c.mu.Lock()
	names := make([]string, 0, len(c.silos))
	for n := range c.silos {
		names = append(names, n)
	}
	c.mu.Unlock()
	for _, n := range names {
		c.stop(n)
	}
	c.etcd.Stop()
}

// waitView waits until every silo's router has exactly the named owners.
func (c *testCluster) waitView(names ...string) {
	c.t.Helper()
	want := fmt.Sprint(names)
	waitFor(c.t, "view "+want, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.silos {
			if fmt.Sprint(s.router.state.Load().owners) != want {
				return false
			}
		}
		return true
	})
}

func ask(ctx context.Context, s *Silo, to string) (string, error) {
	r, err := s.Runtime().Ask(ctx, &grain.Message{To: to, From: "Client:test:x", Message: "hi"})
	if err != nil {
		return "", err
	}
	return r.Message, nil
}

// Every silo routes every address to its owner in the view, and the owner
// answers.
func TestClusterRoutesToOwner(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	silos := []*Silo{c.start("s1"), c.start("s2"), c.start("s3")}
	c.waitView("s1", "s2", "s3")
	names := []string{"s1", "s2", "s3"}
	hosts := map[string]int{}
	for i := range 60 {
		to := fmt.Sprintf("Probe:test:a%d", i)
		want := Owner(to, names)
		for _, s := range silos {
			got, err := ask(t.Context(), s, to)
			if err != nil {
				t.Fatalf("ask %s from %s: %v", to, s.cfg.Name, err)
			}
			if got != want {
				t.Fatalf("%s answered by %s, want its owner %s", to, got, want)
			}
		}
		hosts[want]++
	}
	if len(hosts) != 3 {
		t.Fatalf("60 addresses placed on %v", hosts)
	}
	if n := c.l.started.Load(); n != 60 {
		t.Fatalf("%d activations for 60 addresses", n)
	}
	agents, err := clusterInfo{r: silos[0].router, rt: silos[0].rt}.Agents(t.Context(), "Probe")
	if err != nil || len(agents) != 60 {
		t.Fatalf("cluster-wide agents: %d, %v", len(agents), err)
	}
	ms, _, err := clusterInfo{r: silos[1].router, rt: silos[1].rt}.Members(t.Context())
	if err != nil || len(ms) != 3 {
		t.Fatalf("members: %v, %v", ms, err)
	}
	for _, m := range ms { // every silo's count, not only the answering one's
		if int(m.Activations) != hosts[m.Name] {
			t.Errorf("member %s reports %d activations, it hosts %d", m.Name, m.Activations, hosts[m.Name])
		}
	}
	types, err := clusterInfo{r: silos[2].router, rt: silos[2].rt}.Types(t.Context())
	if err != nil || !slices.ContainsFunc(types, func(ty *agentsilov1.AgentType) bool { return ty.GetName() == "Probe" }) {
		t.Fatalf("types: want Probe (beside the built-in types) %v, %v", types, err)
	}
	// Deactivate through a silo that does not hold the agent: the owner
	// ends it, and the next message activates it again.
	var far string
	for i := range 60 {
		if to := fmt.Sprintf("Probe:test:a%d", i); Owner(to, names) != "s1" {
			far = to
			break
		}
	}
	if _, err := (clusterInfo{r: silos[0].router, rt: silos[0].rt}).Deactivate(t.Context(), far); err != nil {
		t.Fatalf("deactivate %s: %v", far, err)
	}
	c.l.mu.Lock()
	live := c.l.live[far]
	c.l.mu.Unlock()
	if live != 0 {
		t.Fatalf("%s still live after Deactivate returned", far)
	}
	if _, err := ask(t.Context(), silos[0], far); err != nil || c.l.started.Load() != 61 {
		t.Fatalf("after deactivation: %v, %d activations (want 61)", err, c.l.started.Load())
	}
	_, err = ask(t.Context(), silos[0], "Nope:test:x")
	if errs.Code(err) != codes.NotFound {
		t.Fatalf("unknown type: %v", err)
	}
	c.l.check(t)
}

// Silos join and leave gracefully while callers keep asking: every call is
// answered (a graceful hand-over loses nothing) and no address is ever live
// twice.
func TestClusterChurnSingleActivation(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	c.start("s1")
	c.start("s2")
	c.waitView("s1", "s2")

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	defer func() { // before c.close, if the test fails early
		cancel()
		wg.Wait()
	}()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				c.mu.Lock()
				var s *Silo
				for _, x := range c.silos { // any live silo
					s = x
					break
				}
				c.mu.Unlock()
				if s == nil {
					return
				}
				to := fmt.Sprintf("Probe:test:a%d", (w*7+i)%40)
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := ask(cctx, s, to)
				ccancel()
				calls.Add(1)
				if err != nil && ctx.Err() == nil {
					failed.Add(1)
					failMu.Lock()
					failures = append(failures, err.Error())
					failMu.Unlock()
				}
			}
		}()
	}
	waitCalls := func(n int64) {
		target := calls.Load() + n
		waitFor(t, "calls", func() bool { return calls.Load() >= target })
	}
	waitCalls(200)
	c.start("s3")
	c.waitView("s1", "s2", "s3")
	waitCalls(200)
	c.stop("s1")
	c.waitView("s2", "s3")
	waitCalls(200)
	c.start("s1")
	c.waitView("s1", "s2", "s3")
	waitCalls(200)
	c.stop("s3")
	c.waitView("s1", "s2")
	waitCalls(200)
	cancel()
	wg.Wait()
	c.l.check(t)
	t.Logf("%d calls, %d failed", calls.Load(), failed.Load())
	// A silo that is stopping may still be picked by a caller that read
	// the set of silos just before: its runtime answers Unavailable. Any
	// other failure is a lost hand-over.
	for _, f := range failures {
		if !containsAny(f, "shutting down") {
			t.Errorf("call failed: %s", f)
		}
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				return true
			}
		}
	}
	return false
}

// A turn that takes long on a silo that must give its agent away does not
// hold up that silo's later views: it installs them at once, and the agent
// moves when the turn ends.
func TestClusterLongTurnDoesNotBlockViews(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	s1 := c.start("s1")
	c.waitView("s1")
	var to string
	for i := 0; ; i++ {
		to = fmt.Sprintf("Probe:test:long%d", i)
		if Owner(to, []string{"s1", "s2"}) == "s2" && Owner(to, []string{"s1", "s2", "s3"}) != "s1" {
			break
		}
	}
	asked := make(chan error, 1)
	go func() {
		_, err := s1.Runtime().Ask(context.Background(), &grain.Message{To: to, From: "Client:test:x", Message: "block"})
		asked <- err
	}()
	<-c.l.blocked // the turn runs on s1
	c.start("s2")
	c.start("s3")
	c.waitView("s1", "s2", "s3") // s1 too, while its turn still runs
	select {
	case err := <-asked:
		t.Fatalf("the turn ended before it was let go: %v", err)
	default:
	}
	close(c.l.unblock)
	if err := <-asked; err != nil {
		t.Fatal(err)
	}
	want := Owner(to, []string{"s1", "s2", "s3"})
	if got, err := ask(t.Context(), s1, to); err != nil || got != want {
		t.Fatalf("after the turn: %q, %v; want an answer from the new owner %s", got, err, want)
	}
	c.l.check(t)
}
