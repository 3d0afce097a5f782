package mcp_test

import (
	"context"
	"log"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/mcp"
)

// A silo that serves every agent's skills as MCP tools at
// http://127.0.0.1:9191/mcp, and whose agents may call outside MCP servers
// through the agent type MCP, among them one stdio server the program fixes.
func Example() {
	ctx := context.Background()
	reg := grain.NewRegistry()
	// Register the MCP agent type first to set its options; otherwise the
	// silo registers it with the defaults (which also resolve the service
	// directory's MCP entries by name).
	err := mcp.RegisterRemote(reg, mcp.RemoteOptions{
		// An agent configured with command=files runs this server.
		Commands: map[string][]string{"files": {"mcp-server-filesystem", "/srv/shared"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.MCP.Addr = "127.0.0.1:9191" // as --mcp-addr; empty: no MCP server
	silo, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	if err := silo.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer silo.Close(ctx)
	log.Printf("MCP at http://%s/mcp", silo.MCPAddr())
	// A client creates MCP:alice:github with the configuration
	// {mcp.RemoteURL: "https://mcp.example.com/mcp", mcp.RemoteBearerToken: token},
	// lists its tools with the message type mcp.RemoteListTools and calls
	// one with the tool's name as the message type.
	<-silo.Err()
}
