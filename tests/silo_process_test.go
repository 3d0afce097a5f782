package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// bins holds the silo and client binaries, built once per test run.
var bins struct{ silo, client string }

func buildBinaries(t *testing.T) {
	t.Helper()
	if bins.silo != "" {
		return
	}
	dir, err := os.MkdirTemp("", "agentsilo-bin-")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ pkg, out string }{{"../cmd/silo", "silo"}, {"../cmd/client", "client"}} {
		out := filepath.Join(dir, b.out)
		if msg, err := exec.Command("go", "build", "-o", out, b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, msg)
		}
	}
	bins.silo, bins.client = filepath.Join(dir, "silo"), filepath.Join(dir, "client")
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// siloProc is one silo process.
type siloProc struct {
	t       *testing.T
	args    []string
	gateway string
	http    string
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	exited  chan error
}

func startSilo(t *testing.T, dataDir string, extra ...string) *siloProc {
	t.Helper()
	p := &siloProc{t: t, gateway: freePort(t), http: freePort(t)}
	p.args = append([]string{
		"--name", "e2e", "--data-dir", dataDir, "--examples",
		"--gateway-addr", p.gateway, "--http-addr", p.http,
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		// The embedded etcd serves clients on this port and peers on the next.
		"--embedded-etcd-addr", testutil.FreeAddrPair(t),
	}, extra...)
	p.start()
	return p
}

func (p *siloProc) start() {
	p.t.Helper()
	p.stderr.Reset()
	p.cmd = exec.Command(bins.silo, p.args...)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	p.t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	p.waitReady()
}

// waitReady waits for /readyz to answer 200, or for the process to exit.
func (p *siloProc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			p.t.Fatalf("silo exited before ready: %v\n%s", err, p.stderr.String())
		default:
		}
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a named condition
	}
	p.t.Fatalf("silo not ready:\n%s", p.stderr.String())
}

// stop sends sig and waits for the process to exit, returning its exit code.
func (p *siloProc) stop(sig os.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	err := <-p.exited
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return 0
}

// cli runs the client binary against p and returns stdout, stderr and the
// exit code.
func (p *siloProc) cli(args ...string) (string, string, int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.client, append([]string{"--addr", p.gateway}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatal(err)
	}
	return strings.TrimSpace(out.String()), strings.TrimSpace(errOut.String()), code
}

func (p *siloProc) mustAsk(to, text string) string {
	p.t.Helper()
	out, errOut, code := p.cli("ask", to, text)
	if code != 0 {
		p.t.Fatalf("ask %s %q: exit %d: %s", to, text, code, errOut)
	}
	return out
}

// TestSiloProcess runs the real silo and client programs: demo agents, bad
// input with its exit codes, and a graceful SIGTERM.
func TestSiloProcess(t *testing.T) {
	buildBinaries(t)
	p := startSilo(t, t.TempDir())
	if got := p.mustAsk("Echo:e2e", "hello"); got != "hello" {
		t.Fatalf("Echo replied %q", got)
	}
	out, errOut, code := p.cli("ask", "Progress:p", "think")
	if code != 0 || out != "done: think" || strings.Count(errOut, "thinking") != 3 {
		t.Fatalf("Progress: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"ask", "Nope:x", "hi"}, 3, "error: NotFound"},
		{[]string{"ask", "Echo:a:b:c", "hi"}, 2, "error: InvalidArgument"},
		{[]string{"ask", "Echo:x", "hi", "--type", "_silo.stop"}, 2, "error: InvalidArgument"},
		{[]string{"ask", "Counter:c", "add x"}, 2, "error: InvalidArgument"},
		{[]string{"ask", "Echo:x", "big", "--data-file", big, "--data-type", "application/octet-stream"}, 1, "error: ResourceExhausted"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		_, errOut, code := p.cli(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("client %s: exit %d, stderr %q; want exit %d and %q", clipArgs(tc.args), code, errOut, tc.code, tc.msg)
		}
	}
	// The silo is still serving after all that.
	if got := p.mustAsk("Counter:c", "add 2"); got != "2" {
		t.Fatalf("Counter replied %q", got)
	}
	// Its metrics say so.
	m := scrapeMetrics(t, p.http)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"agentsilo_calls_total", map[string]string{"type": "(unregistered)", "kind": "REQUEST", "code": "NotFound"}, 1},
		{"agentsilo_calls_total", map[string]string{"type": "Counter", "kind": "REQUEST", "code": "OK"}, 1},
		{"agentsilo_view_members", nil, 1},
	} {
		if got := metricValue(m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "silo stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.stderr.String())
	}
}

// TestReminderSurvivesRestart: a reminder registered on the only silo fires
// again after a graceful restart and after kill -9, from etcd on disk.
func TestReminderSurvivesRestart(t *testing.T) {
	buildBinaries(t)
	dataDir := t.TempDir()
	p := startSilo(t, dataDir, "--min-reminder-period", "200ms")
	p.mustAsk("Ticker:t", "start 300ms")
	waitTicks := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := strconv.Atoi(p.mustAsk("Ticker:t", "count")); n > 0 {
				return
			}
			time.Sleep(50 * time.Millisecond) // poll interval of a named condition
		}
		t.Fatalf("the reminder never fired:\n%s", p.stderr.String())
	}
	waitTicks()
	out, errOut, code := p.cli("reminders", "Ticker:t")
	if code != 0 || !strings.Contains(out, "tick") || !strings.Contains(out, "300ms") {
		t.Fatalf("reminders: exit %d, %q, %q", code, out, errOut)
	}
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		p.stop(sig)
		p.start() // same data dir and ports: the reminder is loaded from etcd
		waitTicks()
	}
	p.mustAsk("Ticker:t", "stop")
	if out, _, _ := p.cli("reminders", "Ticker:t"); strings.Contains(out, "tick") {
		t.Fatalf("reminder still listed after stop: %q", out)
	}
}

func clipArgs(args []string) string {
	s := fmt.Sprint(args)
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// scrapeMetrics reads and parses a silo's /metrics.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

// metricValue is the value of the counter or gauge name with exactly labels.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(labels) && !(len(got) == 0 && len(labels) == 0) {
			continue
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
