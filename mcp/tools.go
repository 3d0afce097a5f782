package mcp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/grain"
)

// Tools: every skill of a registered type is a tool. Its name is the
// skill's name on an agent's own endpoint and "<Type>_<skill>" on the
// endpoint that serves every agent, with the characters a tool name may
// not hold ([A-Za-z0-9_.-] only, at most 128) replaced by '_'. A type
// without skills has one tool, named after the type (its requests carry
// no message type). A skill whose tool name would be empty, too long or
// the name of another tool of the same endpoint is not offered there (the
// server logs it).
//
// A skill with an InputSchema takes JSON arguments matching it, which the
// agent receives as data (data_type application/json); a skill without
// one takes {"message": "text"}, which the agent receives as the message
// text. On the every-agent endpoint each tool also takes "agent", the
// owner:alias of the agent to ask (a skill whose schema has an argument
// named so is offered on agents' own endpoints only).

// agentArg is the argument that names the agent on the every-agent endpoint.
const agentArg = "agent"

// maxToolName is the longest tool name MCP allows.
const maxToolName = 128

// tool is one skill of one type, as a tool.
type tool struct {
	typ   string // the agent type
	skill string // the request's message type ("" for a type without skills)
	name  string // the tool's name on an agent's endpoint
	desc  string
	// in validates the arguments (without agentArg); text is set when
	// the skill has no input schema: the arguments are {"message": text}.
	in   *jsonschema.Resolved
	text bool
	// session says the text tool takes sessionArg: its type keeps each
	// context apart (grain.TypeInfo.PerContext).
	session bool
	// schema is the input schema as listed on an agent's endpoint, out
	// its output schema (nil: none).
	schema map[string]any
	out    map[string]any
}

// toolNamePart is s with every character a tool name may not hold
// replaced by '_'.
func toolNamePart(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !validToolChar(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func validToolChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// validToolName reports whether name is a tool name MCP allows.
func validToolName(name string) bool {
	if name == "" || len(name) > maxToolName {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !validToolChar(name[i]) {
			return false
		}
	}
	return true
}

// everyAgentName is the name on the every-agent endpoint of a tool named
// name on agents of type typ.
func everyAgentName(typ, name string) string { return typ + "_" + name }

// sessionArg is the argument of a text tool of a type that keeps each
// context apart (grain.TypeInfo.PerContext): true asks the agent of this
// MCP session's context (a model agent's conversation of the session).
const sessionArg = "session"

// textSchema is the input schema of a skill without one; with session,
// it takes sessionArg too.
func textSchema(session bool) map[string]any {
	props := map[string]any{
		"message": map[string]any{"type": "string", "description": "the message text the agent receives"},
	}
	if session {
		props[sessionArg] = map[string]any{"type": "boolean", "description": "true: keep this MCP session's conversation with the agent apart from its others"}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
}

// toolsOf returns ti's tools, and why any skill is left out.
func toolsOf(ti grain.TypeInfo) ([]*tool, []error) {
	var out []*tool
	var problems []error
	seen := make(map[string]bool)
	add := func(skill, name, desc string, in, outSchema json.RawMessage) {
		t, err := newTool(ti.Name, skill, name, desc, in, outSchema, ti.PerContext)
		if err == nil && seen[t.name] {
			err = fmt.Errorf("its tool name %q is another skill's", t.name)
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("type %s, skill %q: %w", ti.Name, skill, err))
			return
		}
		seen[t.name] = true
		out = append(out, t)
	}
	if len(ti.Skills) == 0 {
		desc := ti.Description
		if desc == "" {
			desc = "Agents of type " + ti.Name + "."
		}
		add("", ti.Name, desc, nil, nil)
		return out, problems
	}
	for _, sk := range ti.Skills {
		desc := sk.Description
		if ti.Description != "" {
			if desc == "" {
				desc = ti.Description
			} else {
				desc = sentence(ti.Description) + " Skill " + sk.Name + ": " + desc
			}
		}
		if len(sk.Examples) > 0 {
			desc = sentence(desc) + " Examples: " + strings.Join(quoteAll(sk.Examples), ", ") + "."
		}
		add(sk.Name, toolNamePart(sk.Name), desc, sk.InputSchema, sk.OutputSchema)
	}
	return out, problems
}

// sentence is s ending with a full stop (or its own punctuation).
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// newTool makes the tool of a skill, with its schemas checked.
func newTool(typ, skill, name, desc string, in, out json.RawMessage, perContext bool) (*tool, error) {
	if !validToolName(name) {
		return nil, fmt.Errorf("no valid tool name (want [A-Za-z0-9_.-], at most %d characters)", maxToolName)
	}
	t := &tool{typ: typ, skill: skill, name: name, desc: desc}
	if len(in) == 0 {
		t.text, t.session = true, perContext
		t.schema = textSchema(perContext)
	} else if err := json.Unmarshal(in, &t.schema); err != nil || t.schema == nil {
		return nil, fmt.Errorf("input schema: not a JSON object")
	}
	switch ty := t.schema["type"]; ty {
	case nil:
		t.schema["type"] = "object"
	case "object":
	default:
		return nil, fmt.Errorf("input schema: type %v, but a tool's arguments are an object", ty)
	}
	var err error
	if t.in, err = resolve(t.schema); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if len(out) > 0 {
		// Clients take an output schema of type object only (structured
		// content is an object): others are left out of the listing.
		var m map[string]any
		if json.Unmarshal(out, &m) == nil && m["type"] == "object" {
			t.out = m
		}
	}
	return t, nil
}

// resolve compiles a JSON Schema for validation. References outside it
// are not followed.
func resolve(schema map[string]any) (*jsonschema.Resolved, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// everySchema is t's input schema on the every-agent endpoint: t's with
// the agent argument added, or false if t's schema has one already.
func (t *tool) everySchema() (map[string]any, bool) {
	props, _ := t.schema["properties"].(map[string]any)
	if _, taken := props[agentArg]; taken {
		return nil, false
	}
	s := make(map[string]any, len(t.schema)+1)
	for k, v := range t.schema {
		s[k] = v
	}
	p := make(map[string]any, len(props)+1)
	for k, v := range props {
		p[k] = v
	}
	p[agentArg] = map[string]any{
		"type":        "string",
		"description": "the agent to ask, owner:alias (e.g. dev:e1); it is activated on first use",
		"pattern":     `^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}:[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`,
	}
	s["properties"] = p
	req, _ := t.schema["required"].([]any)
	s["required"] = append(slices.Clone(req), agentArg)
	return s, true
}

// sdkTool is t as the SDK lists it, named name with input schema in.
func (t *tool) sdkTool(name string, in map[string]any) *mcpsdk.Tool {
	st := &mcpsdk.Tool{Name: name, Description: t.desc, InputSchema: in}
	if t.out != nil {
		st.OutputSchema = t.out
	}
	return st
}
