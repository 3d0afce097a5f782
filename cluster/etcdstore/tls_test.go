package etcdstore

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// startTLSEtcd starts a real etcd that serves clients over TLS only and
// requires a client certificate of ca.
func startTLSEtcd(t *testing.T, ca *certstest.CA) string {
	t.Helper()
	cert, key, err := ca.Issue("etcd-server", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "tls"
	cfg.Dir = t.TempDir()
	cu := url.URL{Scheme: "https", Host: testutil.FreeAddr(t)}
	pu := url.URL{Scheme: "http", Host: testutil.FreeAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = cert, key
	cfg.ClientTLSInfo.TrustedCAFile = ca.CertFile
	cfg.ClientTLSInfo.ClientCertAuth = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready")
	}
	return cu.String()
}

// TestSecuredEtcd: the silo's etcd client reaches an etcd that requires TLS
// with a client certificate, and, once auth is on, a user and password;
// without them it is refused.
func TestSecuredEtcd(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // after etcd stopped
	ca, err := certstest.NewCA(t.TempDir(), "etcd CA")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := startTLSEtcd(t, ca)
	cert, key, err := ca.Issue("silo", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var putWithin func(time.Duration, Config) error
	secured := Config{Endpoints: []string{endpoint}, Prefix: "/t", CAFile: ca.CertFile, CertFile: cert, KeyFile: key}
	// put writes through a store of cfg; the store connects lazily, so the
	// write says whether it is let in. A client that is let in gets a
	// minute (a loaded machine is slow to do TLS and auth), one that is
	// not gets 3 s to be refused.
	put := func(cfg Config) error { return putWithin(time.Minute, cfg) }
	refused := func(cfg Config) error { return putWithin(3*time.Second, cfg) }
	putWithin = func(d time.Duration, cfg Config) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		e, err := Start(ctx, cfg)
		if err != nil {
			return err
		}
		defer e.Close()
		_, err = e.Client().Put(ctx, e.Prefix()+"k", "v")
		return err
	}
	if err := put(secured); err != nil {
		t.Fatalf("with TLS and a client certificate: %v", err)
	}
	noCert := secured
	noCert.CertFile, noCert.KeyFile = "", ""
	if err := refused(noCert); err == nil {
		t.Fatal("etcd took a client without a certificate")
	}
	noTLS := Config{Endpoints: []string{endpoint}, Prefix: "/t"}
	if err := refused(noTLS); err == nil {
		t.Fatal("etcd took a client without TLS")
	}

	// Auth on: a root user with a password.
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: mustTLS(t, secured), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	withUser := secured
	withUser.Username, withUser.Password = "root", "s3cret"
	if err := put(withUser); err != nil {
		t.Fatalf("with the user: %v", err)
	}
	wrong := withUser
	wrong.Password = "nope"
	if err := refused(wrong); err == nil {
		t.Fatal("etcd took a wrong password")
	}
}

func mustTLS(t *testing.T, cfg Config) *tls.Config {
	t.Helper()
	c, err := cfg.tlsConfig()
	if err != nil || c == nil {
		t.Fatalf("tls config: %v", err)
	}
	return c
}

// TestEtcdSecurityConfig: TLS and users are for an external etcd, and
// certificate and key, user and password, go together.
func TestEtcdSecurityConfig(t *testing.T) {
	for _, cfg := range []Config{
		{CAFile: "ca.crt"},
		{Endpoints: []string{"x:2379"}, CertFile: "c.crt"},
		{Endpoints: []string{"x:2379"}, Username: "u"},
	} {
		if err := cfg.fill(); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("%+v: %v, want InvalidArgument", cfg, err)
		}
	}
}
