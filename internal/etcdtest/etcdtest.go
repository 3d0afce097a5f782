// Package etcdtest starts a real embedded etcd server for tests: one member
// on 127.0.0.1, its data in the test's temporary directory, stopped at the
// test's cleanup (Start), or for benchmark programs (Run). Tests that need
// etcd use it instead of starting their own.
//
//	cli := etcdtest.Start(t).Client(t)
//	_, err := cli.Put(t.Context(), "k", "v")
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// Server is an embedded etcd member. Stop and Restart it to test what
// happens while etcd is away; its data and addresses stay the same.
type Server struct {
	t          testing.TB
	dir        string
	clientAddr string
	peerAddr   string
	srv        *embed.Etcd
}

// Start starts a server and registers its Stop as t's cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := &Server{t: t, dir: t.TempDir(), clientAddr: testutil.FreeAddr(t), peerAddr: testutil.FreeAddr(t)}
		err := s.start()
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
			// Another test or process took a port between FreeAddr and
			// the listen: new ports.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s
	}
}

// Addr is the client address, host:port.
func (s *Server) Addr() string { return s.clientAddr }

// Endpoint is the client URL, for clientv3.Config.Endpoints or a silo's
// --etcd-endpoints.
func (s *Server) Endpoint() string { return "http://" + s.clientAddr }

// Restart starts the server again after Stop (Start starts it the first
// time); it returns once the server serves.
func (s *Server) Restart() {
	s.t.Helper()
	if s.srv != nil {
		return
	}
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// start starts the server and returns once it serves.
func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = s.dir
	cu := url.URL{Scheme: "http", Host: s.clientAddr}
	pu := url.URL{Scheme: "http", Host: s.peerAddr}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("etcdtest: start: %w", err)
	case <-time.After(time.Minute):
		srv.Close()
		return errors.New("etcdtest: the server did not become ready within a minute")
	}
	s.srv = srv
	return nil
}

// Stop stops the server; clients see it as away until Restart.
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// Client returns a new client of the server, closed at t's cleanup. It
// reconnects quickly after a Restart.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Context:     context.Background(),
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Running is an etcd that Run started for a program (a benchmark), with a
// client of it.
type Running struct {
	srv      *embed.Etcd
	client   *clientv3.Client
	endpoint string
}

// Run starts an etcd keeping its data in dir (created if missing) on free
// loopback ports and waits, bounded by ctx, until it serves. Close stops it.
// Each tune function may change the server's configuration first (a
// program measuring silos rather than the disk turns fsync off, or allows
// larger transactions; the client sends requests up to the server's
// MaxRequestBytes).
func Run(ctx context.Context, dir string, tune ...func(*embed.Config)) (*Running, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i] = l.Addr().String()
		l.Close()
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cu := url.URL{Scheme: "http", Host: addrs[0]}
	pu := url.URL{Scheme: "http", Host: addrs[1]}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop()) // failures come back as errors
	for _, f := range tune {
		f(cfg)
	}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return nil, fmt.Errorf("etcdtest: etcd failed: %w", err)
	case <-ctx.Done():
		srv.Close()
		return nil, fmt.Errorf("etcdtest: waiting for etcd: %w", ctx.Err())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          []string{cu.String()},
		DialTimeout:        5 * time.Second,
		Logger:             zap.NewNop(),
		Context:            context.WithoutCancel(ctx),
		MaxCallSendMsgSize: max(2<<20, int(cfg.MaxRequestBytes)+1<<20),
	})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return &Running{srv: srv, client: cli, endpoint: cu.String()}, nil
}

// Client returns the etcd's client; Close closes it.
func (r *Running) Client() *clientv3.Client { return r.client }

// Endpoint returns the client URL, e.g. http://127.0.0.1:41234.
func (r *Running) Endpoint() string { return r.endpoint }

// Close closes the client and stops the server.
func (r *Running) Close() error {
	err := r.client.Close()
	r.srv.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
