package reminders

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testEtcd is an embedded etcd on loopback ports of its own that a test can
// stop and start again on the same data directory.
type testEtcd struct {
	t          testing.TB
	dir        string
	clientAddr string
	peerAddr   string
	srv        *embed.Etcd
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newTestEtcd(t testing.TB) *testEtcd {
	e := &testEtcd{t: t, dir: t.TempDir(), clientAddr: freePort(t), peerAddr: freePort(t)}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *testEtcd) start() {
	e.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = e.dir
	cu, _ := url.Parse("http://" + e.clientAddr)
	pu, _ := url.Parse("http://" + e.peerAddr)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		e.t.Fatal(err)
	}
	e.srv = srv
}

func (e *testEtcd) stop() {
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
}

func (e *testEtcd) client() *clientv3.Client {
	e.t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + e.clientAddr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// harness runs Services on a test etcd with a fake clock and collects what
// they deliver.
type harness struct {
	t    *testing.T
	ctx  context.Context // the test's context, bounded so that a bug fails instead of hanging
	etcd *testEtcd
	cli  *clientv3.Client
	clk  *clock.Fake
	got  chan *grain.Message
}

func newHarness(t *testing.T) *harness {
	e := newTestEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return &harness{t: t, ctx: ctx, etcd: e, cli: e.client(), clk: clock.NewFake(time.Unix(1_700_000_000, 0)), got: make(chan *grain.Message, 1000)}
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
		Clock:       h.clk,
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
