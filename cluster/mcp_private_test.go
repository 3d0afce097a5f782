package cluster

import (
	"context"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/directory/directorytest"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/mcp"
)

// TestMCPAllowPrivateNetworksFlag: the MCP agent type reaches an MCP server
// on loopback only with --mcp-allow-private-networks, read as `silo` reads
// its flags; --a2a-allow-private-networks, the A2A type's, does not lift
// it, and the refusal names the MCP flag.
func TestMCPAllowPrivateNetworksFlag(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	files := directorytest.StartMCP(t) // on 127.0.0.1
	defer files.Stop()

	for i, c := range []struct {
		args  []string
		allow bool
	}{
		{nil, false},
		{[]string{"--a2a-allow-private-networks"}, false},
		{[]string{"--mcp-allow-private-networks"}, true},
		{[]string{"--mcp-allow-private-networks=false", "--a2a-allow-private-networks"}, false},
	} {
		name := "flags " + strings.Join(c.args, " ")
		cfg, _, _, err := Program{Name: "silo"}.parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.MCP.AllowPrivateNetworks != c.allow {
			t.Fatalf("%s: MCP.AllowPrivateNetworks %v", name, cfg.MCP.AllowPrivateNetworks)
		}
		cfg.Name = "mcpguard"
		cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
		cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/mcpguard" + string(rune('a'+i)) + "/"}
		cfg.Logger = testLogger()
		s, err := NewSilo(cfg, grain.NewRegistry())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		if err := s.Start(ctx); err != nil {
			cancel()
			t.Fatalf("%s: start: %v", name, err)
		}
		cancel()
		const agent = "MCP:system:files"
		if _, err := s.Runtime().CreateAgent(t.Context(), "system", agent, map[string]string{mcp.RemoteURL: files.URL}); err != nil {
			t.Fatalf("%s: create: %v", name, err)
		}
		r, err := s.Runtime().Ask(t.Context(), &grain.Message{To: agent, From: "Session:system:test", MessageType: mcp.RemoteListTools})
		switch {
		case c.allow && (err != nil || !strings.Contains(r.Message, "read_file")):
			t.Errorf("%s: tools/list of a loopback server: %+v, %v; want its tools", name, r, err)
		case !c.allow && (errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--mcp-allow-private-networks")):
			t.Errorf("%s: tools/list of a loopback server: %v; want PermissionDenied naming --mcp-allow-private-networks", name, err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), waitTimeout)
		if err := s.Close(sctx); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
		scancel()
	}
}
