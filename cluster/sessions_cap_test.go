package cluster

import (
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestSessionFloodHoldsTheCap is the session flood of one principal on a
// gateway of a cluster, where each new session registers with its fallback
// holder on another silo before its stream attaches: many streams at once
// open sessions and keep them, and once the flood is over no more of them
// are served than MaxSessionsPerPrincipal. (At its limit, a principal's new
// session replaces its session detached longest; one still opening must not
// count as detached, or it is replaced and then attached uncounted.)
func TestSessionFloodHoldsTheCap(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	const limit, workers, attempts = 4, 16, 600
	c := newTestCluster(t)
	defer c.close()
	capped := func(cfg *SiloConfig, _ *grain.Registry) { cfg.Gateway.Limits.MaxSessionsPerPrincipal = limit }
	s1 := c.startWith("s1", capped)
	c.startWith("s2", capped)
	c.waitView("s1", "s2")

	type held struct {
		stream agentsilov1.Gateway_SessionClient
		cancel func()
	}
	var (
		mu   sync.Mutex
		open []held
		left atomic.Int64
		wg   sync.WaitGroup
	)
	defer func() {
		for _, h := range open {
			h.cancel()
		}
	}()
	left.Store(attempts)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				stream, _, cancel, err := openSession(t, s1.GatewayAddr(), &agentsilov1.Hello{Principal: "mallory"})
				if status.Code(err) == codes.ResourceExhausted {
					continue
				}
				if err != nil {
					t.Errorf("session: %v", err)
					return
				}
				mu.Lock()
				open = append(open, held{stream, cancel})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	served := 0
	for _, h := range open {
		call := &agentsilov1.Call{CallId: 1, Message: &agentsilov1.AgentMessage{To: "Probe:mallory:e", Message: "hi", Kind: agentsilov1.Kind_KIND_REQUEST}}
		if err := h.stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Call{Call: call}}); err != nil {
			continue
		}
		if f, err := h.stream.Recv(); err == nil && f.GetResult().GetError() == nil {
			served++
		}
	}
	t.Logf("%d sessions welcomed of %d attempts; %d serve", len(open), attempts, served)
	if served > limit || served == 0 {
		t.Fatalf("%d sessions of one principal serve, want 1 to the limit of %d", served, limit)
	}
}
