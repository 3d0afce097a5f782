package cluster

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
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

// spanRecorder returns a tracer provider that records every span in rec;
// stop shuts it down (deferred by the test, so before its leak check).
func spanRecorder(t *testing.T) (rec *tracetest.SpanRecorder, tp *sdktrace.TracerProvider, stop func()) {
	rec = tracetest.NewSpanRecorder()
	tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return rec, tp, func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// startBenchSilo starts a silo for a benchmark on the etcd at endpoint,
// under prefix, with the one agent type typ; the benchmark's end closes it.
func startBenchSilo(b *testing.B, endpoint, prefix, name, typ string, f grain.Factory) *Silo {
	b.Helper()
	reg := grain.NewRegistry()
	if err := reg.Register(typ, f); err != nil {
		b.Fatal(err)
	}
	cfg := DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{endpoint}, Prefix: prefix}
	cfg.Logger = testLogger()
	s, err := NewSilo(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}
