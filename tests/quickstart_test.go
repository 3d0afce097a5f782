package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestQuickStart runs the README's quick start: `silo --demo` (on free
// ports and a fresh data directory instead of the defaults, so that it
// runs beside other silos) prints the demo's calls, and the README's
// client commands, as written, answer as their comments say.
func TestQuickStart(t *testing.T) {
	buildBinaries(t)
	if got := strings.TrimSpace(testutil.DocBlock(t, "README.md", "quickstart:silo")); got != "go run ./cmd/silo --demo" {
		t.Fatalf("README quickstart:silo is %q; this test runs `silo --demo`", got)
	}
	gateway := freePort(t)
	stdout := new(testutil.SyncBuffer)
	stderr := new(testutil.SyncBuffer)
	cmd := exec.Command(bins.silo, "--demo", "--name", "quickstart",
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--embedded-etcd-addr", testutil.FreeAddrPair(t),
		"--gateway-addr", gateway, "--http-addr", freePort(t),
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	testutil.WaitFor(t, "the demo's calls", func() bool {
		select {
		case <-exited:
			t.Fatalf("silo --demo exited: %v\n%s", waitErr, stderr)
		default:
		}
		return strings.Contains(stdout.String(), "demo: done")
	})
	for _, want := range []string{
		"reply from Echo:demo:hello: hi there",
		"pushed by Progress:demo:trip: thinking 1/3",
		"reply from Counter:demo:visits: 42",
		`agent type "Nope" is not registered`,
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("silo --demo printed\n%s\nwant %q in it", stdout, want)
		}
	}

	for _, line := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, "README.md", "quickstart:calls")), "\n") {
		words := shellWords(t, line)
		if len(words) < 4 || strings.Join(words[:3], " ") != "go run ./cmd/client" {
			t.Fatalf("README quickstart:calls line %q: want go run ./cmd/client ...", line)
		}
		args := words[3:]
		out, errOut, code := runClient(t, gateway, args...)
		if code != 0 {
			t.Fatalf("client %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		want := map[string]string{
			"Echo:hello": "hi there",
			"Progress:p": "done: plan a trip",
			"FanOut:f":   "5 replies: Echo:dev:f-0=ping #0;",
			"Ticker:t":   "every 1m0s",
			"reminders":  "tick",
			"agents":     "Ticker:dev:t",
		}
		if args[0] == "ask" && args[1] == "Ticker:t" {
			tickerComment(t, line, gateway)
		}
		switch {
		case args[0] == "ask":
			if !strings.Contains(out, want[args[1]]) {
				t.Errorf("client %s printed %q, want %q in it", strings.Join(args, " "), out, want[args[1]])
			}
			if args[1] == "Progress:p" && strings.Count(errOut, "thinking") != 3 {
				t.Errorf("client ask Progress:p: stderr %q, want three progress lines", errOut)
			}
		case !strings.Contains(out, want[args[0]]):
			t.Errorf("client %s printed %q, want %q in it", strings.Join(args, " "), out, want[args[0]])
		}
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-exited
	if waitErr != nil {
		t.Fatalf("silo --demo after Ctrl-C: %v\n%s", waitErr, stderr)
	}
}

// tickerComment checks what the README's Ticker line says of the first
// tick against the reminder it registered: "start 1m" makes it due a
// period from now, not at once.
func tickerComment(t *testing.T, line, gateway string) {
	t.Helper()
	_, comment, _ := strings.Cut(line, "#")
	if strings.Contains(comment, "at once") || !strings.Contains(comment, "first tick a minute from now") {
		t.Errorf("README quickstart:calls: the Ticker line says %q; its first tick comes a minute from now", strings.TrimSpace(comment))
	}
	out, errOut, code := runClient(t, gateway, "-o", "json", "reminders", "Ticker:t")
	var rs struct {
		Reminders []struct {
			Name string    `json:"name"`
			Due  time.Time `json:"due"`
		} `json:"reminders"`
	}
	if err := json.Unmarshal([]byte(out), &rs); code != 0 || err != nil || len(rs.Reminders) != 1 {
		t.Fatalf("client -o json reminders Ticker:t: exit %d, %q, %v: %s", code, out, err, errOut)
	}
	if until := time.Until(rs.Reminders[0].Due); until < 30*time.Second {
		t.Errorf("Ticker:t's reminder is due in %v, not a minute from now", until)
	}
}
