package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestMCPAgentsGuide runs the MCP guide's "Agents using MCP servers"
// (docs/mcp.md) as written: the silo its block starts (on free ports and a
// fresh data directory, the guide's MCP address replaced by the free one),
// then its client commands, against that silo's gateway; an MCP agent of
// the silo lists and calls the demo Echo agent's tool through the silo's
// own MCP endpoint.
func TestMCPAgentsGuide(t *testing.T) {
	const docAddr = "127.0.0.1:9191"
	buildBinaries(t)
	line := strings.TrimSpace(testutil.DocBlock(t, "docs/mcp.md", "mcp:agents-silo"))
	words := strings.Fields(line)
	if len(words) < 3 || strings.Join(words[:3], " ") != "go run ./cmd/silo" || !slices.Contains(words, docAddr) {
		t.Fatalf("docs/mcp.md mcp:agents-silo is %q; this test runs `silo` with its flags and --mcp-addr %s", line, docAddr)
	}
	addr, gw := freePort(t), freePort(t)
	args := append([]string{"--name", "mcpagents", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--embedded-etcd-addr", testutil.FreeAddrPair(t), "--gateway-addr", gw, "--http-addr", freePort(t),
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}, words[3:]...)
	for i, a := range args {
		if a == docAddr {
			args[i] = addr
		}
	}
	stdout, stderr := new(testutil.SyncBuffer), new(testutil.SyncBuffer)
	cmd := exec.Command(bins.silo, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		<-exited
	})
	testutil.WaitFor(t, "silo --demo serving", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("silo exited: %v\n%s", err, stderr)
		default:
		}
		return strings.Contains(stdout.String(), "demo: done")
	})

	// The commands, each in a shell in a directory of its own, `client`
	// being the client binary on the silo's gateway.
	dir := t.TempDir()
	var outs []string
	for _, l := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/mcp.md", "mcp:agents")), "\n") {
		l = strings.ReplaceAll(l, docAddr, addr)
		if rest, ok := strings.CutPrefix(l, "client "); ok {
			l = bins.client + " --addr " + gw + " --timeout 20s " + rest
		}
		c := exec.CommandContext(t.Context(), "bash", "-e", "-c", l)
		c.Dir = dir
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s\nsilo: %s", l, err, out, stderr)
		}
		outs = append(outs, strings.TrimSpace(string(out)))
	}
	if len(outs) != 4 || !strings.HasPrefix(outs[1], "echo: ") || outs[3] != "hello over MCP" {
		t.Fatalf("the guide's commands printed %q; want the echo tool listed and %q", outs, "hello over MCP")
	}
}
