package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/grain"
)

// The service directory's tools, on the every-agent endpoint (/mcp), for a
// model to find who can do a task: search_known_services (a ranked search
// over agent types, outside A2A agents and MCP servers' tools),
// list_known_agents (optionally those with a skill) and get_agent_details.
// Each needs the caller's Read on system:directory; what they return never
// holds an outside entry's credentials.

// The directory tools' names.
const (
	ToolSearchKnownServices = "search_known_services"
	ToolListKnownAgents     = "list_known_agents"
	ToolGetAgentDetails     = "get_agent_details"
)

// AddDirectoryTools adds the directory's three tools to s, answered from
// d, each call checked against a (nil: not checked).
func AddDirectoryTools(s *Server, d *directory.Directory, a *acl.Authority) {
	dt := dirTools{d: d, acl: a}
	s.AddTool(&mcpsdk.Tool{
		Name:        ToolSearchKnownServices,
		Description: "Search the services this cluster knows — its agent types, outside A2A agents and outside MCP servers with their tools — by what they do. Returns the best matches first, each with a score and how to call it (an agent address: replace {owner} with yours and {alias} with any name).",
		InputSchema: dirSchema(map[string]any{
			"query": map[string]any{"type": "string", "description": "What you need done, in a few words, e.g. \"weather forecast for a city\"."},
			"kind":  map[string]any{"type": "string", "enum": []string{grain.KindType, grain.KindA2A, grain.KindMCP}, "description": "Keep one kind: type (agents of this cluster), a2a (outside A2A agents), mcp (outside MCP servers)."},
			"tag":   map[string]any{"type": "string", "description": "Keep services with a skill carrying this tag (for MCP servers: a tool of this name)."},
			"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many results (default 10)."},
		}, "query"),
	}, dt.search)
	s.AddTool(&mcpsdk.Tool{
		Name:        ToolListKnownAgents,
		Description: "List the agents this cluster knows: its agent types and outside A2A agents, with their skills and how to call them; with skill, only those having a skill of that name or tag. At most 100 (more: true says there are others: narrow by skill, or use search_known_services).",
		InputSchema: dirSchema(map[string]any{
			"skill": map[string]any{"type": "string", "description": "A skill's name or tag, e.g. \"translate\"."},
		}),
	}, dt.list)
	s.AddTool(&mcpsdk.Tool{
		Name:        ToolGetAgentDetails,
		Description: "Get everything known of one agent or service by its name (as search_known_services or list_known_agents return it, or kind/name): description, skills with examples, tools, how to call it, when it last answered and its last error.",
		InputSchema: dirSchema(map[string]any{
			"name": map[string]any{"type": "string", "description": "The agent's or service's name, e.g. \"weather\" or \"a2a/weather\"."},
		}, "name"),
	}, dt.get)
}

func dirSchema(props map[string]any, required ...string) map[string]any {
	m := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

// maxListedAgents bounds what list_known_agents returns: a model finds
// among more with search_known_services.
const maxListedAgents = 100

type dirTools struct {
	d   *directory.Directory
	acl *acl.Authority
}

// serviceInfo is an entry as the tools return it.
type serviceInfo struct {
	Name        string      `json:"name"`
	Kind        string      `json:"kind"`
	Description string      `json:"description,omitempty"`
	URL         string      `json:"url,omitempty"`
	Call        string      `json:"call"`
	Skills      []skillInfo `json:"skills,omitempty"`
	Tools       []toolInfo  `json:"tools,omitempty"`
	LastSeen    *time.Time  `json:"lastSeen,omitempty"`
	LastError   string      `json:"lastError,omitempty"`
	Score       float64     `json:"score,omitempty"`
}

type skillInfo struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	Examples    []string `json:"examples,omitempty"`
}

type toolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

func serviceOf(e grain.DirectoryEntry, detail bool) serviceInfo {
	s := serviceInfo{Name: e.Name, Kind: e.Kind, Description: e.Description, URL: e.URL, Call: e.Call, LastError: e.LastError}
	if !e.LastSeen.IsZero() {
		t := e.LastSeen
		s.LastSeen = &t
	}
	for _, sk := range e.Skills {
		si := skillInfo{Name: sk.Name, Description: sk.Description, Tags: sk.Tags}
		if detail {
			si.Examples = sk.Examples
		}
		s.Skills = append(s.Skills, si)
	}
	for _, t := range e.Tools {
		s.Tools = append(s.Tools, toolInfo(t))
	}
	return s
}

// check checks the caller's Read on the directory; a refusal is the
// tool's error result.
func (dt dirTools) check(ctx context.Context) *mcpsdk.CallToolResult {
	c, ok := CallerFrom(ctx)
	if !ok {
		return dirError("no authenticated caller")
	}
	if err := directory.Authorize(dt.acl, c, acl.Read); err != nil {
		return dirError(err.Error())
	}
	return nil
}

func dirError(msg string) *mcpsdk.CallToolResult {
	return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: msg}}}
}

// dirArgs decodes a call's arguments into v; a bad one is the tool's error.
func dirArgs(req *mcpsdk.CallToolRequest, v any) *mcpsdk.CallToolResult {
	if raw := req.Params.Arguments; len(raw) > 0 {
		if err := json.Unmarshal(raw, v); err != nil {
			return dirError("arguments: " + err.Error())
		}
	}
	return nil
}

// dirResult is v as the tool's structured content and as JSON text.
func dirResult(v any) (*mcpsdk.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
}

func (dt dirTools) search(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
	if r := dt.check(ctx); r != nil {
		return r, nil
	}
	var in struct {
		Query string `json:"query"`
		Kind  string `json:"kind"`
		Tag   string `json:"tag"`
		Limit int    `json:"limit"`
	}
	if r := dirArgs(req, &in); r != nil {
		return r, nil
	}
	if strings.TrimSpace(in.Query) == "" {
		return dirError("query: say what you need done"), nil
	}
	if in.Limit <= 0 || in.Limit > 100 {
		in.Limit = 10
	}
	hits, err := dt.d.Search(ctx, grain.DirectoryQuery{Text: in.Query, Kind: in.Kind, Tag: in.Tag, Limit: in.Limit})
	if err != nil {
		return dirError(err.Error()), nil
	}
	out := struct {
		Results []serviceInfo `json:"results"`
	}{Results: []serviceInfo{}}
	for _, h := range hits {
		si := serviceOf(h.Entry, false)
		si.Score = h.Score
		out.Results = append(out.Results, si)
	}
	return dirResult(out)
}

func (dt dirTools) list(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
	if r := dt.check(ctx); r != nil {
		return r, nil
	}
	var in struct {
		Skill string `json:"skill"`
	}
	if r := dirArgs(req, &in); r != nil {
		return r, nil
	}
	entries, err := dt.d.List(ctx, grain.DirectoryQuery{})
	if err != nil {
		return dirError(err.Error()), nil
	}
	out := struct {
		Agents []serviceInfo `json:"agents"`
		// More says there are more than listed: narrow by skill, or search.
		More bool `json:"more,omitempty"`
	}{Agents: []serviceInfo{}}
	for _, e := range entries {
		if e.Kind == grain.KindMCP || (in.Skill != "" && !dirHasSkill(e, in.Skill)) {
			continue
		}
		if len(out.Agents) == maxListedAgents {
			out.More = true
			break
		}
		out.Agents = append(out.Agents, serviceOf(e, false))
	}
	return dirResult(out)
}

// dirHasSkill reports whether e has a skill named or tagged s (ignoring case).
func dirHasSkill(e grain.DirectoryEntry, s string) bool {
	for _, sk := range e.Skills {
		if strings.EqualFold(sk.Name, s) {
			return true
		}
	}
	return (grain.TypeInfo{Skills: e.Skills}).HasTag(s)
}

func (dt dirTools) get(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
	if r := dt.check(ctx); r != nil {
		return r, nil
	}
	var in struct {
		Name string `json:"name"`
	}
	if r := dirArgs(req, &in); r != nil {
		return r, nil
	}
	if in.Name == "" {
		return dirError("name: which agent or service"), nil
	}
	e, err := dt.d.Get(ctx, in.Name)
	if err != nil {
		return dirError(err.Error()), nil
	}
	return dirResult(serviceOf(e, true))
}
