package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// fuzzTools are a skill with an input schema and one without, and the
// registry's check of their type's inputs.
func fuzzTools(t testing.TB) (typed, text *tool, check inputCheck) {
	ti := grain.TypeInfo{Name: "Add", Skills: []grain.Skill{
		{Name: "add", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},"required":["a","b"],"additionalProperties":false}`)},
		{Name: "say it"},
	}}
	reg := grain.NewRegistry()
	if err := reg.Register("Add", func(grain.Host) (grain.Agent, error) { return nil, nil }, ti); err != nil {
		t.Fatal(err)
	}
	tools, problems := toolsOf(ti)
	if len(problems) > 0 || len(tools) != 2 {
		t.Fatalf("tools %v, problems %v", tools, problems)
	}
	if tools[1].name != "say_it" {
		t.Fatalf("the tool of skill %q is named %q, want say_it", "say it", tools[1].name)
	}
	return tools[0], tools[1], reg.ValidateInput
}

// What a client sends the server parses: the endpoint's path, and a
// call's arguments (the agent argument, JSON checked against a schema).
// Nothing may panic; what is accepted is well-formed (a valid address of
// the tool's type, JSON data that is an object without the agent
// argument), and every refusal is InvalidArgument.
func FuzzParse(f *testing.F) {
	for _, seed := range []struct{ path, args string }{
		{"/mcp", `{"agent":"dev:a1","a":1,"b":2}`},
		{"/mcp/Add/dev/a1", `{"a":1,"b":2,"tags":["x"]}`},
		{"/mcp/Add/dev/a1/x", `{"a":"1"}`},
		{"/mcp/Add/d:v/a1", `{"agent":"dev:e:1"}`},
		{"/mcp/", `null`},
		{"/mcp//dev/a1", `[]`},
		{"/mcpx", `{"agent":7}`},
		{"/mcp/Add/dev/..", `{"agent":"dev:a1","message":"hi"}`},
		{"/mcp/Add/dev/a1", `{"message":"hi","extra":true}`},
		{"/mcp", `{"agent":"dev:a1","a":1e400,"b":2}`},
		{"/mcp", "{\"agent\":\"dev:\u00e91\"}"},
	} {
		f.Add(seed.path, seed.args)
	}
	typed, text, check := fuzzTools(f)
	f.Fuzz(func(t *testing.T, path, args string) {
		agent, err := parseEndpoint(path)
		if err == nil && agent.Type != "" {
			if _, perr := grain.ParseAddress(agent.String()); perr != nil {
				t.Fatalf("parseEndpoint(%q) = %v, not a valid address: %v", path, agent, perr)
			}
			if agent.Type != "Add" {
				return
			}
		}
		if err != nil {
			agent = grain.Address{}
		}
		for i, tl := range []*tool{typed, text, typed} {
			var c inputCheck
			if i == 2 {
				c = check // the registry's check instead of the tool's schema
			}
			r, err := decodeArgs(tl, agent, json.RawMessage(args), c)
			if err != nil {
				if errs.Code(err) != codes.InvalidArgument {
					t.Fatalf("decodeArgs(%q): %v, want InvalidArgument", args, err)
				}
				continue
			}
			if r.agent.Type != tl.typ {
				t.Fatalf("decodeArgs(%q) asks %v, not an agent of type %s", args, r.agent, tl.typ)
			}
			if agent.Type != "" && r.agent != agent {
				t.Fatalf("decodeArgs(%q) on %v's endpoint asks %v", args, agent, r.agent)
			}
			if tl.text {
				if r.data != nil {
					t.Fatalf("decodeArgs(%q) of a text skill gave data %q", args, r.data)
				}
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(r.data, &m); err != nil || m == nil {
				t.Fatalf("decodeArgs(%q) gave data %q, not a JSON object: %v", args, r.data, err)
			}
			if _, ok := m[agentArg]; ok && agent.Type == "" {
				t.Fatalf("decodeArgs(%q) left the agent argument in the data %q", args, r.data)
			}
		}
		name := toolNamePart(path)
		if len(name) != len(path) || (name != "" && len(name) <= maxToolName && !validToolName(name)) {
			t.Fatalf("toolNamePart(%q) = %q", path, name)
		}
		if strings.ContainsAny(name, " /:") {
			t.Fatalf("toolNamePart(%q) = %q keeps characters a tool name may not hold", path, name)
		}
	})
}
