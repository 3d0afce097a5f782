package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/llm"
)

// turns groups a record's messages by turn: a turn whose summary was
// trimmed still shows, unsummarized; the turn in progress is running,
// its call without a result marked, even before its first message is
// recorded; long texts are cut; only the last turns are kept.
func TestTurns(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := &llm.Conversation{
		Messages: []llm.Message{
			{Role: llm.RoleUser, Text: "old", Turn: "a"},
			{Role: llm.RoleAssistant, Text: "old answer", Turn: "a"},
			{Role: llm.RoleUser, Text: "go", Turn: "b"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "T_x", Arguments: "{\n  \"k\": 1\n}"}, {ID: "c2", Name: "T_y", Arguments: "{}"}}, Turn: "b"},
			{Role: llm.RoleTool, ToolCallID: "c1", Name: "T_x", Text: strings.Repeat("é", 400), IsError: true, Turn: "b"},
		},
		Turns:   []llm.TurnSummary{{ID: "z", Started: start, Ended: start.Add(time.Second)}},
		Current: &llm.Turn{ID: "b", Started: start, Rounds: 1, Usage: llm.Usage{InputTokens: 5, OutputTokens: 2}},
	}
	got, omitted := turns(rec, 10)
	if len(got) != 2 || omitted != 0 {
		t.Fatalf("%d turns, %d omitted: %+v", len(got), omitted, got)
	}
	if a := got[0]; a.ID != "a" || a.Summarized || a.Running || len(a.Entries) != 2 || a.Entries[1].Kind != "model" {
		t.Errorf("turn a: %+v", a)
	}
	b := got[1]
	if !b.Running || b.Usage.InputTokens != 5 || len(b.Entries) != 4 {
		t.Fatalf("turn b: %+v", b)
	}
	if c := b.Entries[1]; c.Kind != "call" || c.Text != `{ "k": 1 }` || c.Running {
		t.Errorf("the call with a result: %+v", c)
	}
	if c := b.Entries[2]; c.Kind != "call" || c.Name != "T_y" || !c.Running {
		t.Errorf("the call without a result: %+v", c)
	}
	if r := b.Entries[3]; r.Kind != "result" || !r.IsError || !strings.HasPrefix(r.Text, strings.Repeat("é", clipTool)+"… (200 more bytes)") {
		t.Errorf("the result: %+v", r)
	}
	// A turn just started, its message not recorded yet; one turn kept.
	rec.Current = &llm.Turn{ID: "c", Started: start}
	got, omitted = turns(rec, 1)
	if len(got) != 1 || omitted != 2 || got[0].ID != "c" || !got[0].Running || len(got[0].Entries) != 0 {
		t.Errorf("the last turn of 3: %d omitted, %+v", omitted, got)
	}
}
