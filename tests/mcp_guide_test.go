package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestMCPGuide runs the MCP guide (docs/mcp.md) as written, against the
// silo its first block starts, `silo --demo --mcp-addr 127.0.0.1:9191`
// (on free ports and a fresh data directory, and the guide's MCP address
// replaced by the free one): the Inspector's list and call, the desktop
// host configuration (through the Inspector's --config), the TypeScript
// SDK example and the Go SDK example.
func TestMCPGuide(t *testing.T) {
	const docAddr = "127.0.0.1:9191"
	js := mcpJS(t)
	buildBinaries(t)
	line := strings.TrimSpace(testutil.DocBlock(t, "docs/mcp.md", "mcp:silo"))
	words := strings.Fields(line)
	if len(words) < 3 || strings.Join(words[:3], " ") != "go run ./cmd/silo" || !slices.Contains(words, "--mcp-addr") || !slices.Contains(words, docAddr) {
		t.Fatalf("docs/mcp.md mcp:silo is %q; this test runs `silo` with its flags and --mcp-addr %s", line, docAddr)
	}
	addr := freePort(t)
	args := append([]string{"--name", "mcpguide", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--embedded-etcd-addr", testutil.FreeAddrPair(t), "--gateway-addr", freePort(t), "--http-addr", freePort(t),
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
			t.Fatalf("silo --demo exited: %v\n%s", err, stderr)
		default:
		}
		return strings.Contains(stdout.String(), "demo: done")
	})
	at := func(s string) string { return strings.ReplaceAll(s, docAddr, addr) }

	// The Inspector: the block's commands, from the directory it enters.
	lines := strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/mcp.md", "mcp:inspector")), "\n")
	if len(lines) != 3 || lines[0] != "cd tests/mcpjs/node_modules" {
		t.Fatalf("docs/mcp.md mcp:inspector: %q", lines)
	}
	root := testutil.RepoRoot(t)
	run := func(dir, line string) []byte {
		t.Helper()
		c := exec.CommandContext(t.Context(), "bash", "-e", "-c", line)
		c.Dir = dir
		var errOut strings.Builder
		c.Stderr = &errOut
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", line, err, out, errOut.String())
		}
		return out
	}
	dir := filepath.Join(root, "tests", "mcpjs", "node_modules")
	var list struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(run(dir, at(lines[1])), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"Echo_echo", "Counter_count", "Progress_think"} {
		if !slices.Contains(names, want) {
			t.Errorf("the guide's tools/list: %v, want %s in it", names, want)
		}
	}
	var call struct{ Content []struct{ Text string } }
	if err := json.Unmarshal(run(dir, at(lines[2])), &call); err != nil {
		t.Fatal(err)
	}
	if len(call.Content) != 1 || call.Content[0].Text != "hello" {
		t.Errorf("the guide's tools/call: %+v, want hello", call)
	}

	// The host configuration, read by the Inspector.
	cfgFile := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfgFile, []byte(at(testutil.DocBlock(t, "docs/mcp.md", "mcp:host"))), 0o600); err != nil {
		t.Fatal(err)
	}
	list.Tools = nil
	if err := json.Unmarshal(run(dir, "npx mcp-inspector-cli --cli --config "+cfgFile+" --server agentsilo --method tools/list"), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != len(names) {
		t.Errorf("through the host configuration the Inspector lists %d tools, directly %d", len(list.Tools), len(names))
	}

	// TypeScript: beside tests/mcpjs's node_modules.
	script := filepath.Join(js, "guide-hello.mjs")
	if err := os.WriteFile(script, []byte(at(testutil.DocBlock(t, "docs/mcp.md", "mcp:ts"))), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	out, err := exec.CommandContext(t.Context(), "node", script).CombinedOutput()
	want := "Progress_think is a tool\n" +
		"progress 1: thinking 1/3 about \"plan a trip\"\nprogress 2: thinking 2/3 about \"plan a trip\"\nprogress 3: thinking 3/3 about \"plan a trip\"\n" +
		"done: plan a trip\n"
	if err != nil || string(out) != want {
		t.Errorf("the guide's TypeScript client: %v\n%s\nwant\n%s", err, out, want)
	}

	// Go: a module of its own, on the MCP SDK version this module pins.
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(at(testutil.DocBlock(t, "docs/mcp.md", "mcp:go"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ver, err := goCmd(t, "", "list", "-m", "-f", "{{.Version}}", "github.com/modelcontextprotocol/go-sdk").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mod", "init", "example.com/hello"},
		{"get", "github.com/modelcontextprotocol/go-sdk@" + strings.TrimSpace(string(ver))},
		{"mod", "tidy"},
	} {
		if out, err := goCmd(t, mod, args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	out, err = goCmd(t, mod, "run", ".").CombinedOutput()
	want = "progress: thinking 1/3 about \"plan a trip\"\nprogress: thinking 2/3 about \"plan a trip\"\nprogress: thinking 3/3 about \"plan a trip\"\n" +
		"reply: done: plan a trip\n"
	if err != nil || string(out) != want {
		t.Errorf("the guide's Go client: %v\n%s\nwant\n%s", err, out, want)
	}
}

// mcpJS returns tests/mcpjs, or skips the test without node and npx or
// without its pinned npm packages (npm ci --prefix tests/mcpjs, which CI
// runs).
func mcpJS(t *testing.T) string {
	t.Helper()
	testutil.NeedCommand(t, "node", "Node.js 20 or later, Debian's nodejs package: the MCP guide's TypeScript and Inspector examples")
	testutil.NeedCommand(t, "npx", "Debian's npm package: the MCP guide runs the Inspector with npx")
	dir := filepath.Join(testutil.RepoRoot(t), "tests", "mcpjs")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "package.json"))
	testutil.Need(t, err == nil, "tests/mcpjs's pinned npm packages: npm ci --prefix tests/mcpjs")
	return dir
}

// The MCP guide's AddTool fragment compiles against this checkout, in a
// module of a reader's that uses it through a replace.
func TestMCPGuideAddTool(t *testing.T) {
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/addtool\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	src := "package addtool\n\nimport (\n\t\"context\"\n\n\tmcpsdk \"github.com/modelcontextprotocol/go-sdk/mcp\"\n\n" +
		"\t\"github.com/agentsilo/agentsilo/cluster\"\n\t\"github.com/agentsilo/agentsilo/mcp\"\n)\n\n" +
		testutil.DocBlock(t, "docs/mcp.md", "mcp:addtool") + "\nvar _ = addWhoami\n"
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "addtool.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(mod, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := goCmd(t, mod, "vet", "-mod=mod", "./...").CombinedOutput(); err != nil {
		t.Fatalf("the guide's AddTool fragment does not compile: %v\n%s", err, out)
	}
}

// goCmd is the go command with args in dir, as a reader runs it: without
// the GOFLAGS this test may run under (CI's -race -json).
func goCmd(t *testing.T, dir string, args ...string) *exec.Cmd {
	c := exec.CommandContext(t.Context(), "go", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GOFLAGS=")
	return c
}
