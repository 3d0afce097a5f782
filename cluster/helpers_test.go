package cluster

import (
	"context"
	"log/slog"
	"testing"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"go.uber.org/goleak"
)

const waitTimeout = testutil.WaitTimeout

func leakOptions() []goleak.Option { return testutil.LeakOptions() }

func testLogger() *slog.Logger { return testutil.Logger() }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
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
