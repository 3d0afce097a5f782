// Package etcdtest starts a single-node embedded etcd on loopback ports of
// its own, for tests (Start) and benchmark programs (Run).
//
//	cli := etcdtest.Start(t) // stopped, and its client closed, at cleanup
//	_, err := cli.Put(t.Context(), "k", "v")
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd and a client of it.
type Server struct {
	srv      *embed.Etcd
	client   *clientv3.Client
	endpoint string
}

// Run starts an etcd keeping its data in dir (created if missing) and waits,
// bounded by ctx, until it serves. Close stops it.
func Run(ctx context.Context, dir string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	paddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cu := url.URL{Scheme: "http", Host: caddr}
	pu := url.URL{Scheme: "http", Host: paddr}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop()) // failures come back as errors
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
		Endpoints:   []string{cu.String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return &Server{srv: srv, client: cli, endpoint: cu.String()}, nil
}

// Client returns the server's client; Close closes it.
func (s *Server) Client() *clientv3.Client { return s.client }

// Endpoint returns the client URL, e.g. http://127.0.0.1:41234.
func (s *Server) Endpoint() string { return s.endpoint }

// Close closes the client and stops the server.
func (s *Server) Close() error {
	err := s.client.Close()
	s.srv.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Start runs an etcd in a temporary directory of t for the rest of the test
// and returns its client; both are closed at cleanup. It fails the test if
// the etcd does not start within a minute.
func Start(t testing.TB) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Run(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("etcdtest: close: %v", err)
		}
	})
	return s.client
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
