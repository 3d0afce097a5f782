package cluster

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/grain"
)

// TestDashboardNotAnonymous: without authentication, the dashboard of a
// silo whose HTTP port is not loopback shows nothing (403) while the
// probes still answer; a TLS dashboard address needs the gateway's
// certificate, and without authentication a loopback address.
func TestDashboardNotAnonymous(t *testing.T) {
	c := newTestCluster(t)
	defer c.close()
	s := c.startWith("d0", func(cfg *SiloConfig, _ *grain.Registry) { cfg.HTTPAddr = "0.0.0.0:0" })
	_, port, _ := net.SplitHostPort(s.HTTPAddr())
	for path, want := range map[string]int{"/ui/": http.StatusForbidden, "/ui/agents": http.StatusForbidden, "/healthz": http.StatusOK} {
		resp, err := http.Get("http://127.0.0.1:" + port + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if s.DashboardAddr() != "" {
		t.Errorf("DashboardAddr %q without --dashboard-addr", s.DashboardAddr())
	}
	cfg := DefaultSiloConfig()
	cfg.Name, cfg.GatewayAddr, cfg.HTTPAddr, cfg.DashboardAddr = "d1", "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd.Endpoints, cfg.Etcd.Prefix = []string{c.etcd.Endpoint()}, "/t"
	cfg.Logger = testLogger()
	s1, err := NewSilo(cfg, grain.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	err = s1.Start(t.Context())
	s1.Close(context.Background())
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("--dashboard-addr without TLS: %v, want InvalidArgument naming --tls-cert", err)
	}
}
