package cluster

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestProgramFencedKeepsPorts: a silo program cut off from etcd past its
// lease keeps its HTTP port and its gateway port answering. Suspended,
// its silo serves them (/readyz says suspended). Fenced when it reaches
// etcd again and finds its lease gone, and cut off again, the program's
// stand-in serves them, both while the fenced silo is torn down and while
// the next one tries to start: /healthz answers 200, /readyz 503 saying
// `fenced: <cause>`, /metrics serves (agentsilo_fenced 1), the gRPC
// health service says NOT_SERVING, and an Ask gets Unavailable saying
// the silo is fenced, not a refused connection. Once etcd is back, the
// new silo serves on the same ports.
func TestProgramFencedKeepsPorts(t *testing.T) {
	opts := leakOptions()
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) }) // after the etcd client's cleanup
	etcd := etcdtest.Start(t)
	// The silo reaches etcd through a link that the test cuts.
	link := newLink(t, etcd.Addr())
	defer link.close()
	cli := etcd.Client(t)

	blocked, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	reg := grain.NewRegistry()
	if err := reg.Register("Echo", func(grain.Host) (grain.Agent, error) {
		return agentFunc(func(_ context.Context, m *grain.Message) (*grain.Message, error) {
			if m.Message == "block" {
				blocked <- struct{}{}
				<-release
			}
			r := m.Response()
			r.Message = m.Message
			return r, nil
		}), nil
	}); err != nil {
		t.Fatal(err)
	}
	type addrs struct{ gateway, http string }
	started := make(chan addrs, 1)
	p := Program{Registry: reg, AfterStart: func(_ context.Context, s *Silo) error {
		started <- addrs{s.GatewayAddr(), s.HTTPAddr()}
		return nil
	}}
	var stderr testutil.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- p.Run([]string{"--name", "a", "--gateway-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--etcd-endpoints", link.addr(), "--etcd-prefix", "/t",
			// A bound on tearing the fenced silo down while the turn below
			// holds it, which the test ends first.
			"--shutdown-timeout", "2m", "--log-format", "json"}, &stderr, &stderr)
	}()
	var a addrs
	select {
	case a = <-started:
	case c := <-code:
		t.Fatalf("the program exited with %d before it served; its log:\n%s", c, stderr.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("the program's log:\n%s", stderr.String())
		}
		unblock()
		// Stop it as an operator would (Run catches SIGTERM).
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0; its log:\n%s", c, stderr.String())
			}
		case <-time.After(waitTimeout):
			t.Fatalf("the program still ran after SIGTERM; its log:\n%s", stderr.String())
		}
	}()
	if reply := askGateway(t, a.gateway, "hi"); reply != "hi" {
		t.Fatalf("Ask answered %q, want hi", reply)
	}

	// A turn that runs until the test ends it: the fenced silo's teardown
	// waits for it (its gateway drains), which holds the next silo's start
	// until the test has cut etcd off again.
	asked := make(chan error, 1)
	go func() {
		_, err := askGatewayErr(t, a.gateway, "block")
		asked <- err
	}()
	<-blocked

	link.cut()
	waitFor(t, "/readyz to say the silo is suspended", func() bool {
		code, body := httpGet(t, a.http, "/readyz")
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "suspended since")
	})
	if code, _ := httpGet(t, a.http, "/healthz"); code != http.StatusOK {
		t.Errorf("suspended: /healthz = %d, want 200", code)
	}
	if code, body := httpGet(t, a.http, "/metrics"); code != http.StatusOK || !strings.Contains(body, "\nagentsilo_suspended 1\n") {
		t.Errorf("suspended: /metrics = %d, want 200 with agentsilo_suspended 1", code)
	}
	// Its lease expires in etcd, which the test reaches directly.
	waitFor(t, "etcd to expire the silo's lease (its record gone)", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		resp, err := cli.Get(ctx, "/t", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "members/a") {
				return false
			}
		}
		return true
	})

	// Back in touch with etcd, the silo finds its lease gone and fences;
	// the stand-in takes the ports; etcd is cut off again.
	link.mend()
	waitFor(t, "the stand-in to answer /readyz for the fenced silo", func() bool {
		_, body := httpGet(t, a.http, "/readyz")
		return strings.Contains(body, "starting again under a new lease")
	})
	link.cut()
	checkFencedPorts(t, a.http, a.gateway)

	// The fenced silo's teardown ends; the next silo cannot reach etcd.
	unblock()
	if err := <-asked; err != nil {
		t.Logf("the turn held across the fence: %v", err)
	}
	waitFor(t, "the program to start its silo again", func() bool {
		return strings.Contains(stderr.String(), "starting the silo again under a new lease after fencing")
	})
	checkFencedPorts(t, a.http, a.gateway)

	// etcd back: the new silo serves on the same ports.
	link.mend()
	waitFor(t, "/readyz to answer ready", func() bool {
		code, _ := httpGet(t, a.http, "/readyz")
		return code == http.StatusOK
	})
	if reply := askGateway(t, a.gateway, "again"); reply != "again" {
		t.Fatalf("Ask answered %q after the silo started again, want again", reply)
	}
	if code, body := httpGet(t, a.http, "/metrics"); code != http.StatusOK || !strings.Contains(body, "\nagentsilo_fenced 0\n") || !strings.Contains(body, "agentsilo_calls_total") {
		t.Errorf("serving again: /metrics = %d, want 200 with agentsilo_fenced 0 and the silo's metrics", code)
	}
}

// checkFencedPorts checks what a fenced silo program's ports answer.
func checkFencedPorts(t *testing.T, httpAddr, gwAddr string) {
	t.Helper()
	if code, body := httpGet(t, httpAddr, "/healthz"); code != http.StatusOK {
		t.Errorf("fenced: /healthz = %d %q, want 200", code, body)
	}
	code, body := httpGet(t, httpAddr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "fenced: ") {
		t.Errorf("fenced: /readyz = %d %q, want 503 fenced: <cause>", code, body)
	}
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	if code, body := httpGet(t, httpAddr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "\nagentsilo_fenced 1\n") || !strings.Contains(body, "\ngo_goroutines ") {
		t.Errorf("fenced: /metrics = %d, want 200 with agentsilo_fenced 1 and the Go runtime's metrics", code)
	}

	conn, err := grpc.NewClient(gwAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("fenced: gRPC health = %v, %v; want NOT_SERVING", h.GetStatus(), err)
	}
	_, err = agentsilov1.NewGatewayClient(conn).Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:dev:e", Message: "hi"}})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "fenced: ") {
		t.Errorf("fenced: Ask = %v, want Unavailable saying the silo is fenced", err)
	} else {
		t.Logf("Ask: %v", err)
	}
}

// httpGet returns the status and body of GET path on addr.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A connection per request, as the kubelet's probes: one kept alive
	// would still reach the fenced silo's server until it closes.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// askGateway asks Echo:dev:e msg through the gateway at addr and returns
// its reply.
func askGateway(t *testing.T, addr, msg string) string {
	t.Helper()
	reply, err := askGatewayErr(t, addr, msg)
	if err != nil {
		t.Fatalf("Ask %q: %v", msg, err)
	}
	return reply
}

func askGatewayErr(t *testing.T, addr, msg string) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	resp, err := agentsilov1.NewGatewayClient(conn).Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Echo:dev:e", Message: msg},
		TimeoutMs: (5 * time.Minute).Milliseconds()})
	if err != nil {
		return "", err
	}
	return resp.GetMessage().GetMessage(), nil
}
