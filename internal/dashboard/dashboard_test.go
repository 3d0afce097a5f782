package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// agentsGateway answers ListAgents with a fixed list: synthetic data for
// the render measurement, the gateway's own part left out.
type agentsGateway struct {
	agentsilov1.GatewayClient
	agents []*agentsilov1.ActivationInfo
}

func (g agentsGateway) ListAgents(context.Context, *agentsilov1.ListAgentsRequest, ...grpc.CallOption) (*agentsilov1.ListAgentsResponse, error) {
	return &agentsilov1.ListAgentsResponse{Agents: g.agents}, nil
}

// synthetic makes n activations over 20 types, 500 owners and 3 silos.
func synthetic(n int) []*agentsilov1.ActivationInfo {
	now := time.Now()
	out := make([]*agentsilov1.ActivationInfo, n)
	for i := range out {
		out[i] = &agentsilov1.ActivationInfo{
			Address:      fmt.Sprintf("Type%d:owner%d:agent-%d", i%20, i%500, i),
			Silo:         fmt.Sprintf("silo-%d", i%3),
			ActivatedAt:  timestamppb.New(now.Add(-time.Hour)),
			LastActive:   timestamppb.New(now.Add(-time.Duration(i) * time.Millisecond)),
			MailboxDepth: uint32(i % 7),
		}
	}
	return out
}

// newTest is a dashboard without authentication over agents.
func newTest(t testing.TB, agents []*agentsilov1.ActivationInfo) *Dashboard {
	d, err := New(Config{Silo: "s0", Conn: noConn{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.gw = agentsGateway{agents: agents}
	return d
}

// noConn is a connection no test calls through.
type noConn struct{ grpc.ClientConnInterface }

func TestAgentsPage(t *testing.T) {
	d := newTest(t, synthetic(1000))
	h := d.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/agents?q=agent-99", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, "1000 active agents, 11 matching") || !strings.Contains(body, "Type19:owner499:agent-999") {
		t.Fatalf("%d %s", rec.Code, body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	// htmx's poll gets the live part alone.
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/ui/agents", nil)
	req.Header.Set("HX-Request", "true")
	req.Header.Set("HX-Target", "live")
	h.ServeHTTP(rec, req)
	if b := rec.Body.String(); !strings.HasPrefix(b, `<div id="live"`) || strings.Count(b, "<tr><td class=\"name\">") != maxRows {
		t.Errorf("live part: %.300s", b)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "/ui/",
		"/ui/agents?type=Chat":  "/ui/agents?type=Chat",
		"//evil.example/ui/":    "/ui/",
		"https://evil.example/": "/ui/",
		"/elsewhere":            "/ui/",
		"/ui":                   "/ui/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/agents", "//x/ui/", "/ui/../x", "https://e/ui/", "\\\\e/ui/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := safeNext(s)
		if !strings.HasPrefix(got, "/ui/") || strings.HasPrefix(got, "//") || strings.Contains(got, "\\") && !strings.Contains(s, "\\") {
			t.Errorf("safeNext(%q) = %q", s, got)
		}
	})
}

func TestQuantile(t *testing.T) {
	// 100 observations: 50 up to 1 ms, 40 up to 10 ms, 10 up to 100 ms.
	bs := []bucket{{0.001, 50}, {0.01, 90}, {0.1, 100}}
	if q := quantile(bs, 0.5); q != 0.001 {
		t.Errorf("p50 %v", q)
	}
	if q := quantile(bs, 0.99); q < 0.09 || q > 0.1 {
		t.Errorf("p99 %v", q)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("empty: %v", q)
	}
}

func TestSessionsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	ss := newSessions(3, time.Hour, func() time.Time { return now })
	var first *session
	for i := range 10 {
		s := ss.add("", nil)
		if i == 0 {
			first = s
		}
		now = now.Add(time.Second)
	}
	if len(ss.m) != 3 || ss.get(first.id) != nil {
		t.Errorf("%d sessions kept, the first still there: %v", len(ss.m), ss.get(first.id) != nil)
	}
}

// BenchmarkAgentsPage renders the agents page of a cluster with 100,000
// activations: counting them by type and owner, choosing the 200 most
// recently active and executing the template (the gateway's answer is
// given, not fetched).
func BenchmarkAgentsPage(b *testing.B) {
	d := newTest(b, synthetic(100_000))
	h := d.Handler()
	for _, c := range []struct{ name, path string }{{"all", "/ui/agents"}, {"search", "/ui/agents?q=agent-4"}} {
		b.Run(c.name, func(b *testing.B) {
			// The process's CPU time per page too: on a shared machine
			// the wall time per op counts waiting for a core.
			cpu0 := cpuTime()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
