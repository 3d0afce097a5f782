package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/memory"
)

// tool is one tool the model may call.
type tool struct {
	spec ToolSpec
	// input checks the arguments (nil: any JSON object).
	input *jsonschema.Resolved
	run   func(ctx context.Context, c callContext, args json.RawMessage) (string, error)
	// approval: its calls wait for a person's decision (the definition's
	// approval list, the skill's TypeInfo, an outside agent at trust
	// observe). free, if set, says a call with these arguments runs
	// without one (an outside agent at trust act: its approved skills),
	// and any other waits.
	approval bool
	free     func(args string) bool
	// sensitive: once the model has read untrusted content, its calls
	// wait for a person's decision, or are refused (the definition's
	// sensitive list and on_untrusted, the skill's TypeInfo).
	sensitive bool
}

// needsApproval reports whether a call of t with args waits for a
// person's decision.
func (t *tool) needsApproval(args string) bool {
	return t.approval || (t.free != nil && !t.free(args))
}

// callContext is what a tool call runs with.
type callContext struct {
	host grain.Host
	// key is the call's idempotency key: <turn>/<round>/<call id>.
	key string
	// ownOnly restricts agent tools to the agent owner's agents: the turn
	// was resumed by its reminder, on behalf of the owner rather than of
	// the principal who started it, and must not use the owner's rights
	// on others' agents.
	ownOnly bool
	// label and outside are the content label of the messages the call
	// sends: tool-request, or lower, as the least trusted content the
	// model has read.
	label   grain.Label
	outside bool
	// result, if not nil, gets the label of the reply of the agent the
	// call asked (the tool's result then carries it).
	result *resultLabel
}

// toolSet is the tools of a definition, by name, and their specs in order.
type toolSet struct {
	byName map[string]*tool
	specs  []ToolSpec
}

func (s *toolSet) add(t *tool) error {
	if s.byName[t.spec.Name] != nil {
		return errs.New(codes.InvalidArgument, "tools: two tools are named %s", t.spec.Name)
	}
	if t.input == nil {
		rs, err := compile(t.spec.Schema)
		if err != nil {
			return errs.Wrap(codes.InvalidArgument, err, "tools: %s: the arguments' schema", t.spec.Name)
		}
		t.input = rs
	}
	s.byName[t.spec.Name] = t
	s.specs = append(s.specs, t.spec)
	return nil
}

func compile(raw json.RawMessage) (*jsonschema.Resolved, error) {
	if rs := compiled.get(raw); rs != nil {
		return rs, nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	compiled.put(raw, rs)
	return rs, nil
}

// compiled keeps the schemas compile resolved, by their text: every
// activation of a type builds the same tools, and resolving their
// schemas again was a good part of starting one. A Resolved is only read
// when it validates, so activations share it. Schemas come from the
// silo's types and from outside MCP servers, so the cache is bounded:
// once full it starts again empty.
var compiled = schemaCache{m: make(map[string]*jsonschema.Resolved)}

// maxCompiled bounds the schemas kept.
const maxCompiled = 1024

type schemaCache struct {
	mu sync.Mutex
	m  map[string]*jsonschema.Resolved
}

func (c *schemaCache) get(raw json.RawMessage) *jsonschema.Resolved {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[string(raw)]
}

func (c *schemaCache) put(raw json.RawMessage, rs *jsonschema.Resolved) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCompiled {
		clear(c.m)
	}
	c.m[string(raw)] = rs
}

// buildTools makes the tools of def, reading agent types from reg (else
// from the directory, for types registered on other silos only).
func buildTools(ctx context.Context, h grain.Host, reg *grain.Registry, def *Definition) (*toolSet, error) {
	set := &toolSet{byName: make(map[string]*tool)}
	for i, ref := range def.Tools {
		var tools []*tool
		var err error
		field := fmt.Sprintf("tools[%d]", i)
		switch {
		case ref.Agent != "":
			field += ".agent"
			tools, err = agentTools(ctx, h, reg, ref.Agent)
		case ref.Directory:
			tools = directoryTools()
		case ref.Memory:
			tools = memoryTools(h.Address().Alias)
		case ref.MCP != "":
			field += ".mcp"
			tools, err = mcpTools(ctx, h, ref.MCP)
		case ref.A2A != "":
			field += ".a2a"
			tools, err = a2aTools(ctx, h, ref.A2A)
		default:
			err = errs.New(codes.InvalidArgument, "names no tool")
		}
		if err != nil {
			return nil, errs.Wrap(errs.Code(err), err, "definition %s: %s", def.Type, field)
		}
		for _, t := range tools {
			if err := set.add(t); err != nil {
				return nil, err
			}
		}
	}
	if slices.ContainsFunc(def.Tools, func(r ToolRef) bool { return r.A2A != "" }) {
		// Where the outside agents' background answers are kept.
		if err := set.add(getFromWorkingMemory()); err != nil {
			return nil, err
		}
	}
	for i, name := range def.Approval {
		t := set.byName[name]
		if t == nil {
			return nil, errs.New(codes.FailedPrecondition, "definition %s: approval[%d]: %s is not one of the agent's tools (%s)", def.Type, i, name, strings.Join(set.names(), ", "))
		}
		t.approval = true
	}
	for i, name := range def.Sensitive {
		t := set.byName[name]
		if t == nil {
			return nil, errs.New(codes.FailedPrecondition, "definition %s: sensitive[%d]: %s is not one of the agent's tools (%s)", def.Type, i, name, strings.Join(set.names(), ", "))
		}
		t.sensitive = true
	}
	return set, nil
}

// names are the tools' names, sorted.
func (s *toolSet) names() []string {
	names := make([]string, 0, len(s.specs))
	for _, sp := range s.specs {
		names = append(names, sp.Name)
	}
	slices.Sort(names)
	return names
}

// toolNameOf makes a tool name of parts: [A-Za-z0-9_-], at most 64 bytes.
func toolNameOf(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('_')
		}
		for _, r := range p {
			if r < 128 && (r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
	}
	s := b.String()
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// agentTools are the tools of an agent type: one per typed skill, or one
// plain ask if it has none.
func agentTools(ctx context.Context, h grain.Host, reg *grain.Registry, typ string) ([]*tool, error) {
	var info grain.TypeInfo
	var ok bool
	if reg != nil {
		info, ok = reg.Info(typ)
	}
	if !ok {
		e, err := h.Directory().Get(ctx, grain.KindType+"/"+typ)
		if err != nil {
			return nil, errs.Wrap(codes.FailedPrecondition, err, "agent type %s: not registered on this silo, nor found in the directory", typ)
		}
		info = grain.TypeInfo{Name: e.Name, Description: e.Description, Skills: e.Skills}
	}
	agentArg := map[string]any{"type": "string", "description": fmt.Sprintf("which %s agent to ask: its alias, or owner:alias", typ)}
	var tools []*tool
	for _, sk := range info.Skills {
		if len(sk.InputSchema) == 0 {
			continue
		}
		var in any
		if err := json.Unmarshal(sk.InputSchema, &in); err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "agent type %s: skill %s: input schema", typ, sk.Name)
		}
		rs, err := compile(sk.InputSchema)
		if err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "agent type %s: skill %s: input schema", typ, sk.Name)
		}
		schema := mustJSON(map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"agent": agentArg, "input": in},
			"required":             []string{"agent", "input"},
			"additionalProperties": false,
		})
		desc := sk.Description
		if desc == "" {
			desc = info.Description
		}
		skill := sk.Name
		tools = append(tools, &tool{
			approval:  sk.Approval,
			sensitive: sk.Sensitive,
			spec:      ToolSpec{Name: toolNameOf(typ, skill), Description: fmt.Sprintf("Ask a %s agent (skill %s): %s", typ, skill, desc), Schema: schema},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var a struct {
					Agent string          `json:"agent"`
					Input json.RawMessage `json:"input"`
				}
				if err := json.Unmarshal(args, &a); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				if err := validate(rs, a.Input); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments: input does not match the skill's schema")
				}
				return askAgent(ctx, c, typ, a.Agent, &grain.Message{MessageType: skill, DataType: grain.JSONType, Data: a.Input})
			},
		})
	}
	if len(tools) == 0 {
		desc := info.Description
		if desc == "" {
			desc = "an agent of the cluster"
		}
		tools = append(tools, &tool{
			spec: ToolSpec{Name: toolNameOf("ask", typ), Description: fmt.Sprintf("Ask a %s agent and get its answer. %s", typ, desc), Schema: mustJSON(map[string]any{
				"type": "object",
				"properties": map[string]any{
					"agent": agentArg,
					"text":  map[string]any{"type": "string", "description": "what to ask it"},
				},
				"required":             []string{"agent", "text"},
				"additionalProperties": false,
			})},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var a struct{ Agent, Text string }
				if err := json.Unmarshal(args, &a); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				return askAgent(ctx, c, typ, a.Agent, &grain.Message{Message: a.Text})
			},
		})
	}
	return tools, nil
}

// askAgent asks the agent typ:who (who is alias or owner:alias) with msg,
// under the call's idempotency key, from the turn's context (so on behalf
// of the turn's principal), and returns its reply's JSON data or text.
func askAgent(ctx context.Context, c callContext, typ, who string, msg *grain.Message) (string, error) {
	r, applied, err := ask(ctx, c, typ, who, msg)
	if err != nil || r == nil {
		return applied, err
	}
	return replyText(r), nil
}

// ask is askAgent's Ask: the reply, or (with a nil reply and error) what
// the model is told of a call its callee ran already, before the agent
// restarted, whose answer was lost.
func ask(ctx context.Context, c callContext, typ, who string, msg *grain.Message) (*grain.Message, string, error) {
	if strings.TrimSpace(who) == "" {
		return nil, "", errs.New(codes.InvalidArgument, "arguments: agent is empty")
	}
	addr, err := grain.Resolve(typ+":"+who, c.host.Owner())
	if err != nil {
		return nil, "", err
	}
	if c.ownOnly && addr.Owner != c.host.Owner() {
		return nil, "", errs.New(codes.PermissionDenied, "%s is another owner's agent, and this turn was resumed without its caller (on behalf of the agent's owner): it may ask only %s's agents", addr, c.host.Owner())
	}
	msg.IdempotencyKey = c.key
	msg.Label, msg.Outside = c.label, c.outside
	r, err := c.host.Ask(ctx, addr.String(), msg)
	if err != nil {
		if errors.Is(err, grain.ErrApplied) {
			return nil, fmt.Sprintf("%s already ran this call before the agent restarted, and its answer was lost; it was not run again.", addr), nil
		}
		return nil, "", err
	}
	c.result.got(r)
	return r, "", nil
}

// replyText is what the model gets of a reply: its JSON data, after its
// text if it has both, else its text.
func replyText(r *grain.Message) string {
	if len(r.Data) > 0 && (r.DataType == grain.JSONType || json.Valid(r.Data)) {
		if r.Message == "" {
			return string(r.Data)
		}
		return r.Message + "\n" + string(r.Data)
	}
	return r.Message
}

// validate checks the JSON data against rs.
func validate(rs *jsonschema.Resolved, data []byte) error {
	var v any
	if len(bytes.TrimSpace(data)) == 0 {
		v = map[string]any{}
	} else if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return rs.Validate(v)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	return b
}

// directoryTools search the service directory and read an entry.
func directoryTools() []*tool {
	return []*tool{
		{
			spec: ToolSpec{
				Name:        "directory_search",
				Description: "Search the directory of agent types, outside A2A agents and MCP servers for what can do a task; returns the best matches with how to call them.",
				Schema: mustJSON(map[string]any{
					"type": "object",
					"properties": map[string]any{
						"text":  map[string]any{"type": "string", "description": "words describing the task"},
						"kind":  map[string]any{"type": "string", "enum": []string{grain.KindType, grain.KindA2A, grain.KindMCP}},
						"tag":   map[string]any{"type": "string"},
						"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 50},
					},
					"required":             []string{"text"},
					"additionalProperties": false,
				}),
			},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var q struct {
					Text, Kind, Tag string
					Limit           int
				}
				if err := json.Unmarshal(args, &q); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				hits, err := c.host.Directory().Search(ctx, grain.DirectoryQuery{Text: q.Text, Kind: q.Kind, Tag: q.Tag, Limit: q.Limit})
				if err != nil {
					return "", err
				}
				type skill struct {
					Name        string `json:"name"`
					Description string `json:"description,omitempty"`
				}
				type hit struct {
					Name        string  `json:"name"`
					Kind        string  `json:"kind"`
					Description string  `json:"description,omitempty"`
					Call        string  `json:"call,omitempty"`
					Skills      []skill `json:"skills,omitempty"`
				}
				out := []hit{}
				for _, h := range hits {
					e := hit{Name: h.Entry.Name, Kind: h.Entry.Kind, Description: h.Entry.Description, Call: h.Entry.Call}
					for _, s := range h.Entry.Skills {
						e.Skills = append(e.Skills, skill{s.Name, s.Description})
					}
					out = append(out, e)
				}
				return string(mustJSON(out)), nil
			},
		},
		{
			spec: ToolSpec{
				Name:        "directory_details",
				Description: "Read one directory entry by name (kind/name picks one of a kind): its skills with their input schemas, or an MCP server's tools.",
				Schema: mustJSON(map[string]any{
					"type":                 "object",
					"properties":           map[string]any{"name": map[string]any{"type": "string"}},
					"required":             []string{"name"},
					"additionalProperties": false,
				}),
			},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var q struct{ Name string }
				if err := json.Unmarshal(args, &q); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				e, err := c.host.Directory().Get(ctx, q.Name)
				if err != nil {
					return "", err
				}
				return string(mustJSON(e)), nil
			},
		},
	}
}

// memoryTools read and write the working memory Memory:<owner>:<scope>.
func memoryTools(scope string) []*tool {
	obj := func(props map[string]any, required ...string) json.RawMessage {
		return mustJSON(map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false})
	}
	str := map[string]any{"type": "string"}
	return []*tool{
		{
			spec: ToolSpec{Name: "memory_put", Description: "Keep a note in the working memory under a key (replacing what the key held), for a while (ttl_minutes, default 60).", Schema: obj(map[string]any{
				"key": str, "text": str, "category": str, "ttl_minutes": map[string]any{"type": "integer", "minimum": 1, "maximum": 10080},
			}, "key", "text")},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var a struct {
					Key, Text, Category string
					TTLMinutes          int `json:"ttl_minutes"`
				}
				if err := json.Unmarshal(args, &a); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				e, err := memory.Of(c.host, scope).Put(ctx, client.MemoryEntry{Key: a.Key, Text: a.Text, Category: a.Category, TTL: time.Duration(a.TTLMinutes) * time.Minute})
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("kept %q until %s", e.Key, e.Expires.UTC().Format(time.RFC3339)), nil
			},
		},
		{
			spec: ToolSpec{Name: "memory_get", Description: "Read the note kept under a key in the working memory.", Schema: obj(map[string]any{"key": str}, "key")},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var a struct{ Key string }
				if err := json.Unmarshal(args, &a); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				e, err := memory.Of(c.host, scope).Get(ctx, a.Key)
				if err != nil {
					return "", err
				}
				return string(mustJSON(e)), nil
			},
		},
		{
			spec: ToolSpec{Name: "memory_search", Description: "Find the notes of the working memory containing every word of text.", Schema: obj(map[string]any{
				"text": str, "limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 100},
			}, "text")},
			run: func(ctx context.Context, c callContext, args json.RawMessage) (string, error) {
				var a struct {
					Text  string
					Limit int
				}
				if err := json.Unmarshal(args, &a); err != nil {
					return "", errs.Wrap(codes.InvalidArgument, err, "arguments")
				}
				es, err := memory.Of(c.host, scope).Search(ctx, a.Text, a.Limit)
				if err != nil {
					return "", err
				}
				if es == nil {
					es = []client.MemoryEntry{}
				}
				return string(mustJSON(es)), nil
			},
		},
	}
}
