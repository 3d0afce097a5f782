package dashboard

import (
	"context"
	"net/http"

	"github.com/agentsilo/agentsilo/mcp"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// mcpView is the MCP page: this silo's MCP server (its open sessions and
// the agents' tools it offers) and the outside MCP servers the directory
// knows.
type mcpView struct {
	Off      bool // the silo serves no MCP
	Addr     string
	All      bool // the principal sees every session, not only its own
	Sessions []mcp.SessionInfo
	Tools    []mcp.ToolInfo
	Servers  []*agentsilov1.DirectoryEntry
	DirError string
}

// mcpData lists the sessions the principal may see: its own, or, for an
// administrator of the ACL (Admin on system:acl, or group admins),
// everyone's; the tools, as the MCP server lists them to any
// authenticated caller; and the directory's MCP servers, with what the
// directory's Read allows.
func (d *Dashboard) mcpData(ctx context.Context, s *session, _ *http.Request) (any, error) {
	v := &mcpView{Off: d.cfg.MCP == nil, Addr: d.cfg.MCPAddr}
	if d.cfg.MCP != nil {
		v.All = d.cfg.ACL == nil || d.cfg.ACL.IsAdmin(s.caller)
		for _, si := range d.cfg.MCP.Sessions() {
			if v.All || si.Principal == s.caller.Principal {
				v.Sessions = append(v.Sessions, si)
			}
		}
		v.Tools = d.cfg.MCP.Tools()
		if len(v.Tools) > maxRows {
			v.Tools = v.Tools[:maxRows]
		}
	}
	resp, err := d.dir.List(ctx, &agentsilov1.DirectoryListRequest{Kind: "mcp", Limit: maxRows})
	if err != nil {
		v.DirError = message(err)
	}
	v.Servers = resp.GetEntries()
	return v, nil
}
