package dashboard

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestDashboardDemo runs the guide's first command, `silo --demo` (on
// free ports and a fresh data directory), and finds the cluster live at
// /ui of its HTTP port without logging in: it runs without authentication
// on loopback.
func TestDashboardDemo(t *testing.T) {
	if got := strings.TrimSpace(testutil.DocBlock(t, "docs/dashboard.md", "dashboard:demo")); got != "go run ./cmd/silo --demo" {
		t.Fatalf("docs/dashboard.md dashboard:demo is %q; this test runs `silo --demo`", got)
	}
	base, _ := startDemo(t)
	resp, err := http.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>Cluster") || !strings.Contains(string(body), `class="state-alive">alive`) {
		t.Fatalf("/ui: %d\n%s", resp.StatusCode, body)
	}
}

// startDemo builds the silo and runs `silo --demo` until the test ends,
// returning its HTTP base URL and process, once the demo's calls are done.
func startDemo(tb testing.TB) (string, *os.Process) {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "silo")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/agentsilo/agentsilo/cmd/silo").CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	httpAddr := testutil.FreeAddr(tb)
	var out testutil.SyncBuffer
	cmd := exec.Command(bin, "--demo", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", httpAddr, "--gateway-addr", testutil.FreeAddr(tb), "--embedded-etcd-addr", testutil.FreeAddrPair(tb),
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		<-exited
	})
	testutil.WaitFor(tb, "the demo's calls", func() bool {
		select {
		case <-exited:
			tb.Fatalf("silo --demo exited:\n%s", out.String())
		default:
		}
		return strings.Contains(out.String(), "demo: done")
	})
	return "http://" + httpAddr, cmd.Process
}
