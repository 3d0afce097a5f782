package mcp_test

import (
	"slices"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp"
)

// Sessions lists each open session with its principal, endpoint, client
// and tool calls, and forgets it once closed; Tools lists the agents'
// tools of /mcp.
func TestSessionsAndTools(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/mcpsess/", nil)
	srv := s.MCP()
	every := mustConnect(t, s, "/mcp", map[string]string{"x-agentsilo-principal": "dev"}, nil)
	one := mustConnect(t, s, "/mcp/Echo/dev/e1", map[string]string{"x-agentsilo-principal": "dev"}, nil)
	if _, err := every.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Echo_echo", Arguments: map[string]any{"agent": "dev:e1", "message": "hi"}}); err != nil {
		t.Fatal(err)
	}
	find := func(id string) (mcp.SessionInfo, bool) {
		i := slices.IndexFunc(srv.Sessions(), func(si mcp.SessionInfo) bool { return si.ID == id })
		if i < 0 {
			return mcp.SessionInfo{}, false
		}
		return srv.Sessions()[i], true
	}
	si, ok := find(every.ID())
	if !ok || si.Principal != "dev" || si.Endpoint != "/mcp" || si.Client != "agentsilo-test 1" || si.Calls != 1 || si.Started.IsZero() {
		t.Errorf("the /mcp session: %+v %v", si, ok)
	}
	if si, ok := find(one.ID()); !ok || si.Endpoint != "/mcp/Echo/dev/e1" || si.Calls != 0 {
		t.Errorf("the agent's session: %+v %v", si, ok)
	}
	one.Close()
	testutil.WaitFor(t, "the closed session forgotten", func() bool { _, ok := find(one.ID()); return !ok })

	tools := srv.Tools()
	if !slices.ContainsFunc(tools, func(ti mcp.ToolInfo) bool { return ti.Name == "Echo_echo" && ti.Type == "Echo" && ti.Description != "" }) {
		t.Errorf("Tools lacks Echo_echo: %+v", tools)
	}
}
