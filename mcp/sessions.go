package mcp

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// SessionInfo is one open MCP session of a silo's server, as the silo's
// dashboard lists it.
type SessionInfo struct {
	ID        string
	Principal string // who opened it
	Endpoint  string // the path: /mcp, or /mcp/{Type}/{owner}/{alias}
	Client    string // the client's name and version, as it said at initialize
	Started   time.Time
	LastUsed  time.Time
	Calls     int64 // tool calls made in it
}

// ToolInfo is one tool of the every-agent endpoint (/mcp) made from an
// agent type's skill.
type ToolInfo struct {
	Name, Type, Description string
}

// sessionStats keeps what the SDK does not about each session.
type sessionStats struct {
	mu sync.Mutex
	m  map[*mcpsdk.ServerSession]*SessionInfo
}

// track is the SDK middleware that notes each session's principal,
// endpoint, client, last use and tool calls.
func (s *Server) track(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		ss, ok := req.GetSession().(*mcpsdk.ServerSession)
		if ri, known := infoOf(req.GetExtra()); ok && known {
			now := time.Now()
			st := &s.stats
			st.mu.Lock()
			if st.m == nil {
				st.m = map[*mcpsdk.ServerSession]*SessionInfo{}
			}
			info := st.m[ss]
			if info == nil {
				if len(st.m) >= 2*s.cfg.MaxSessions+16 {
					st.m = s.liveStats(st.m)
				}
				ep := endpointRoot
				if ri.agent.Type != "" {
					ep += "/" + ri.agent.Type + "/" + ri.agent.Owner + "/" + ri.agent.Alias
				}
				info = &SessionInfo{ID: ss.ID(), Principal: ri.caller.Principal, Endpoint: ep, Started: now}
				st.m[ss] = info
			}
			info.LastUsed = now
			if method == "tools/call" {
				info.Calls++
			}
			if p, ok := req.GetParams().(*mcpsdk.InitializeParams); ok && p != nil && p.ClientInfo != nil {
				info.Client = strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
			}
			st.mu.Unlock()
		}
		return next(ctx, method, req)
	}
}

// servers are the SDK servers of the endpoints made so far.
func (s *Server) servers() []*mcpsdk.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*mcpsdk.Server{s.every}
	for _, srv := range s.types {
		out = append(out, srv)
	}
	return out
}

// liveStats keeps the stats of the sessions still open.
func (s *Server) liveStats(m map[*mcpsdk.ServerSession]*SessionInfo) map[*mcpsdk.ServerSession]*SessionInfo {
	live := map[*mcpsdk.ServerSession]*SessionInfo{}
	for _, srv := range s.servers() {
		for ss := range srv.Sessions() {
			if info := m[ss]; info != nil {
				live[ss] = info
			}
		}
	}
	return live
}

// Sessions returns the server's open sessions, oldest first. It is safe
// to call at any time.
func (s *Server) Sessions() []SessionInfo {
	st := &s.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	st.m = s.liveStats(st.m)
	out := make([]SessionInfo, 0, len(st.m))
	for _, info := range st.m {
		out = append(out, *info)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Tools returns the tools of the every-agent endpoint that come from the
// registered types' skills, by name (a server's own tools, AddTool's, are
// not among them).
func (s *Server) Tools() []ToolInfo {
	var out []ToolInfo
	for _, ti := range s.reg.Types() {
		tools, _ := toolsOf(ti)
		for _, t := range tools {
			name := everyAgentName(t.typ, t.name)
			if _, ok := t.everySchema(); !ok || !validToolName(name) {
				continue
			}
			out = append(out, ToolInfo{Name: name, Type: t.typ, Description: t.desc})
		}
	}
	slices.SortFunc(out, func(a, b ToolInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
