package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/grain"
)

// Skills become tools: names made valid, collisions and schemas a tool
// cannot take left out with a reason, a missing type filled in, an output
// schema kept only when it is an object's, and the agent argument added
// on the every-agent endpoint unless the skill has its own.
func TestToolsOf(t *testing.T) {
	ti := grain.TypeInfo{Name: "Desk", Description: "Books things", Skills: []grain.Skill{
		{Name: "book a room", Description: "books", Examples: []string{"room 4"}},
		{Name: "book_a_room"},
		{Name: "scalar", InputSchema: json.RawMessage(`{"type":"string"}`)},
		{Name: "untyped", InputSchema: json.RawMessage(`{"properties":{"n":{"type":"integer"}}}`), OutputSchema: json.RawMessage(`{"type":"array"}`)},
		{Name: "own-agent", InputSchema: json.RawMessage(`{"type":"object","properties":{"agent":{"type":"string"}}}`), OutputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: strings.Repeat("x", 129)},
	}}
	tools, problems := toolsOf(ti)
	var names []string
	byName := map[string]*tool{}
	for _, tl := range tools {
		names = append(names, tl.name)
		byName[tl.name] = tl
	}
	if strings.Join(names, ",") != "book_a_room,untyped,own-agent" {
		t.Fatalf("tools %v", names)
	}
	if len(problems) != 3 {
		t.Fatalf("problems %v, want the collision, the scalar schema and the long name", problems)
	}
	if b := byName["book_a_room"]; b.skill != "book a room" || !b.text || b.desc != `Books things. Skill book a room: books. Examples: "room 4".` {
		t.Fatalf("book_a_room: %+v", b)
	}
	if u := byName["untyped"]; u.schema["type"] != "object" || u.out != nil {
		t.Fatalf("untyped: schema %v, output %v", u.schema, u.out)
	}
	if _, ok := byName["own-agent"].everySchema(); ok {
		t.Fatal("own-agent, whose input has an agent argument, is offered on /mcp")
	}
	s, ok := byName["untyped"].everySchema()
	if !ok || s["required"].([]any)[0] != agentArg || s["properties"].(map[string]any)["n"] == nil {
		t.Fatalf("untyped on /mcp: %v", s)
	}
	if byName["untyped"].schema["required"] != nil {
		t.Fatal("everySchema changed the tool's own schema")
	}
	none, _ := toolsOf(grain.TypeInfo{Name: "Bare"})
	if len(none) != 1 || none[0].name != "Bare" || none[0].skill != "" {
		t.Fatalf("a type without skills: %+v", none)
	}
}
