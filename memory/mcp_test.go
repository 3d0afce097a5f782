package memory_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/memory"
)

// The memory's skills are MCP tools that work: the official TypeScript
// SDK (tests/mcpjs/memory.mjs) lists them with their schemas, puts an
// entry and gets it back, lists, searches and deletes it, on the
// every-agent endpoint and on a memory's own, and is refused arguments
// that do not match; then the example of docs/memory.md runs as written.
func TestMemoryMCPFromTypeScript(t *testing.T) {
	testutil.NeedCommand(t, "node", "Node.js 20 or later, Debian's nodejs package: the MCP TypeScript SDK is the client of this test")
	dir := filepath.Join(testutil.RepoRoot(t), "tests", "mcpjs")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	testutil.Need(t, err == nil, "tests/mcpjs's pinned npm packages: npm ci --prefix tests/mcpjs")

	e := etcdtest.Start(t)
	reg := grain.NewRegistry()
	if err := memory.Register(reg, memory.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "mcp"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.MCP.Addr = "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/memmcp/"}
	cfg.Logger = testutil.Logger()
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })

	out, err := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "memory.mjs"), "http://"+s.MCPAddr()+"/mcp", "dev").CombinedOutput()
	if err != nil {
		t.Fatalf("node memory.mjs: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "ok "); n != 18 {
		t.Errorf("%d checks passed, want 18:\n%s", n, out)
	}

	// The guide's example, beside tests/mcpjs's node_modules, on this
	// silo's MCP address.
	const docAddr = "127.0.0.1:9191"
	script := filepath.Join(dir, "memory-guide-"+strings.ReplaceAll(s.MCPAddr(), ":", "-")+".mjs")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(testutil.DocBlock(t, "docs/memory.md", "memory:mcp"), docAddr, s.MCPAddr())), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	if out, err := exec.CommandContext(t.Context(), "node", script).CombinedOutput(); err != nil || string(out) != "Hotel Avenida\n" {
		t.Errorf("docs/memory.md's MCP example: %v\n%s\nwant Hotel Avenida", err, out)
	}
}
