package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp/mcptest"
)

// jsDir returns tests/mcpjs, or skips the test without node or without
// its pinned npm packages (npm ci --prefix tests/mcpjs, which CI runs).
func jsDir(t *testing.T) string {
	t.Helper()
	testutil.NeedCommand(t, "node", "Node.js 20 or later, Debian's nodejs package: the TypeScript SDK and the Inspector are the independent MCP clients of these tests")
	dir := filepath.Join(testutil.RepoRoot(t), "tests", "mcpjs")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "package.json"))
	testutil.Need(t, err == nil, "tests/mcpjs's pinned npm packages: npm ci --prefix tests/mcpjs")
	return dir
}

// The official TypeScript SDK, as a client of a silo with API keys: it is
// refused without a key, lists, calls (text, structured content, an
// agent's error, bad arguments), receives progress, cancels a long call
// (whose turn ends cancelled on the silo) and is refused by the ACL.
func TestJSClient(t *testing.T) {
	dir := jsDir(t)
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/js/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: keyHash("alice-key"), Principal: "alice"}, {SHA256: keyHash("bob-key"), Principal: "bob"}}
	})
	cmd := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "client.mjs"), "http://"+s.MCPAddr()+"/mcp", "alice-key")
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client failed: %v", err)
	}
	for _, check := range []string{"refused without credentials", "tools/list: Add_add has an output schema", "call: structured content",
		"call: an agent error is isError", "call: bad arguments are invalid params", "call: progress notifications", "call: cancelled",
		"call: refused by the ACL", "call after the cancel"} {
		if !strings.Contains(string(out), "ok "+check+"\n") {
			t.Errorf("the TypeScript client did not pass %q", check)
		}
	}
	if err := <-mcptest.Ended("Slow:alice:js-slow"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the turn of the call the TypeScript client cancelled ended with %v, want context canceled", err)
	}
}

// The MCP Inspector's command-line client lists the tools and calls one,
// with text and with JSON arguments.
func TestInspectorCLI(t *testing.T) {
	dir := jsDir(t)
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/insp/", nil)
	url := "http://" + s.MCPAddr() + "/mcp"

	var list struct {
		Tools []struct {
			Name        string
			InputSchema struct{ Required []string }
		}
	}
	inspector(t, dir, &list, url, "--transport", "http", "--header", "x-agentsilo-principal: dev", "--method", "tools/list")
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "Echo_echo") || !slices.Contains(names, "Add_add") {
		t.Fatalf("the Inspector listed %v", names)
	}

	var echo struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	inspector(t, dir, &echo, url, "--transport", "http", "--method", "tools/call", "--tool-name", "Echo_echo", "--tool-arg", "agent=dev:e1", "--tool-arg", "message=hello inspector")
	if echo.IsError || len(echo.Content) != 1 || echo.Content[0].Text != "hello inspector" {
		t.Fatalf("the Inspector's Echo_echo call: %+v", echo)
	}

	var add struct {
		StructuredContent struct{ Sum float64 }
	}
	inspector(t, dir, &add, url, "--transport", "http", "--method", "tools/call", "--tool-name", "Add_add", "--tool-arg", "agent=dev:a1", "a=20", "b=22")
	if add.StructuredContent.Sum != 42 {
		t.Fatalf("the Inspector's Add_add call: %+v", add)
	}
}

// inspector runs the Inspector's CLI mode with args and decodes its JSON
// output into out. It runs in node_modules: the CLI reads its own
// package.json relative to the working directory's parent.
func inspector(t *testing.T, dir string, out any, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "node", append([]string{filepath.Join(dir, "node_modules", ".bin", "mcp-inspector-cli"), "--cli"}, args...)...)
	cmd.Dir = filepath.Join(dir, "node_modules")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("mcp-inspector-cli %v: %v\n%s%s", args, err, stdout, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("mcp-inspector-cli %v printed %s: %v", args, stdout, err)
	}
}
