package reminders

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs Services on a test etcd with a fake clock and collects what
// they deliver.
type harness struct {
	t    *testing.T
	ctx  context.Context // the test's context, bounded so that a bug fails instead of hanging
	etcd *etcdtest.Server
	cli  *clientv3.Client
	clk  *clock.Fake
	got  chan *grain.Message
}

func newHarness(t *testing.T) *harness {
	e := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return &harness{t: t, ctx: ctx, etcd: e, cli: e.Client(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0)), got: make(chan *grain.Message, 1000)}
}

func (h *harness) config() Config {
	return Config{
		Client:    h.cli,
		Prefix:    "/test/",
		MinPeriod: 50 * time.Millisecond,
		Known:     func(typ string) bool { return typ != "Unknown" },
		Deliver: func(_ context.Context, m *grain.Message) error {
			h.got <- m
			return nil
		},
		clk:         h.clk,
		Concurrency: 4,
	}
}

func (h *harness) start(cfg Config) *Service {
	h.t.Helper()
	s, err := New(h.ctx, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

// loaded waits for the service's first load.
func (h *harness) loaded(s *Service) {
	h.t.Helper()
	select {
	case <-s.Loaded():
	case <-h.ctx.Done():
		h.t.Fatal("not loaded")
	}
}

// fired flushes s and checks how many ticks it has fired in all, then takes
// the new ones off the delivery channel.
func (h *harness) fired(s *Service, want uint64, seen *uint64) []*grain.Message {
	h.t.Helper()
	if err := s.flush(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	if got := s.Stats().Fired; got != want {
		h.t.Fatalf("fired %d ticks, want %d", got, want)
	}
	var out []*grain.Message
	for ; *seen < want; *seen++ {
		select {
		case m := <-h.got:
			out = append(out, m)
		case <-h.ctx.Done():
			h.t.Fatal("tick not delivered")
		}
	}
	return out
}

// settled waits until s has applied its last Rebalance and loaded its
// buckets.
func (h *harness) settled(s *Service) {
	h.t.Helper()
	if err := s.Settled(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

// waitFor waits until cond holds: a named condition, checked as the state
// changes, bounded by the test's deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
