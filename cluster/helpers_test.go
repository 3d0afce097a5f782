package cluster

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"go.uber.org/goleak"
)

// waitTimeout bounds every wait on a condition: generous, so that a slow
// machine does not fail the tests; conditions are awaited, never timed.
const waitTimeout = 45 * time.Second

// leakOptions are goleak's options for tests that start silos. memberlist's
// Shutdown does not wait for a probe in flight: that goroutine ends by
// itself within a probe interval, so it is not a leak.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func1"),
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("AGENTSILO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		<-tick.C
	}
}

// agentFunc is an agent made of its OnMessage.
type agentFunc func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f agentFunc) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// newTestRegistry returns an empty registry.
func newTestRegistry(t *testing.T) *grain.Registry {
	t.Helper()
	return grain.NewRegistry()
}
