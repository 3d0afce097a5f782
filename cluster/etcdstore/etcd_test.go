package etcdstore

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func testEtcdConfig(t *testing.T, dir string) Config {
	return Config{DataDir: dir, EmbeddedAddr: testutil.FreeAddr(t), EmbeddedPeerAddr: testutil.FreeAddr(t), Prefix: "/t"}
}

func startEtcd(t *testing.T, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The embedded etcd keeps data across a restart on the same directory, serves
// other silos (external endpoints) and stops every goroutine at Close.
func TestEmbeddedEtcd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := testEtcdConfig(t, t.TempDir())
	e := startEtcd(t, cfg)
	if !e.Embedded() || e.Prefix() != "/t/" {
		t.Fatalf("Embedded = %v, Prefix = %q", e.Embedded(), e.Prefix())
	}
	if _, err := e.Client().Put(t.Context(), e.Prefix()+"k", "v"); err != nil {
		t.Fatal(err)
	}

	// Another local silo points --etcd-endpoints at the embedded one.
	ext := startEtcd(t, Config{Endpoints: []string{"http://" + cfg.EmbeddedAddr}, Prefix: "/t/"})
	if ext.Embedded() {
		t.Fatal("external Etcd says it is embedded")
	}
	resp, err := ext.Client().Get(t.Context(), ext.Prefix()+"k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get through external endpoints = %v, %v", resp, err)
	}
	if err := ext.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}

	e = startEtcd(t, cfg)
	defer e.Close()
	resp, err = e.Client().Get(t.Context(), e.Prefix()+"k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get after restart = %v, %v", resp, err)
	}
}

func TestStartEtcdBadConfig(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if _, err := Start(t.Context(), Config{EmbeddedAddr: "no-port"}); err == nil {
		t.Fatal("Start with a bad address: no error")
	}
	// The port is taken: Start fails and leaves nothing running.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testEtcdConfig(t, t.TempDir())
	cfg.EmbeddedAddr = l.Addr().String()
	if _, err := Start(t.Context(), cfg); err == nil {
		t.Fatal("Start on a taken port: no error")
	}
}

func TestEtcdConfigStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := startEtcd(t, testEtcdConfig(t, t.TempDir()))
	store := NewConfigStore(e)
	addr := grain.Address{Type: "Pipeline", Owner: "acme", Alias: "p"}
	if cfg, err := store.Get(t.Context(), addr); err != nil || cfg != nil {
		t.Fatalf("Get of a never created agent = %v, %v; want nil, nil", cfg, err)
	}
	want := map[string]string{"stages": "Echo:a,Echo:b", "model": "small"}
	if err := store.Put(t.Context(), addr, want); err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(t.Context(), addr)
	if err != nil || len(got) != 2 || got["stages"] != want["stages"] || got["model"] != "small" {
		t.Fatalf("Get = %v, %v; want %v", got, err, want)
	}
	if err := store.Put(t.Context(), addr, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := store.Get(t.Context(), addr); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Get after an empty Put = %v, %v; want empty, not nil", got, err)
	}

	// etcd gone: Unavailable, no hang, no panic.
	e.stopServer()
	store.timeout = 300 * time.Millisecond
	if _, err := store.Get(t.Context(), addr); errs.Code(err) != codes.Unavailable {
		t.Fatalf("Get with etcd down = %v, want Unavailable", err)
	}
	if err := store.Put(t.Context(), addr, want); errs.Code(err) != codes.Unavailable {
		t.Fatalf("Put with etcd down = %v, want Unavailable", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := store.Get(ctx, addr); errs.Code(err) != codes.Canceled {
		t.Fatalf("Get with a cancelled context = %v, want Canceled", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// A silo starts while its external etcd is away: calls that need etcd are
// Unavailable, nothing hangs or crashes.
func TestExternalEtcdAway(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := startEtcd(t, Config{Endpoints: []string{"http://" + testutil.FreeAddr(t)}})
	defer e.Close()
	store := NewConfigStore(e)
	store.timeout = 300 * time.Millisecond
	if _, err := store.Get(t.Context(), grain.Address{Type: "A", Owner: "b", Alias: "c"}); errs.Code(err) != codes.Unavailable {
		t.Fatalf("Get with etcd away = %v, want Unavailable", err)
	}
}
