package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// recordJSON is a model agent's record as its conversation skill returns
// it (llm.Conversation): a turn that ended, after a tool call, and one in
// progress whose tool call has no result yet.
const recordJSON = `{
  "messages": [
    {"role": "user", "text": "what is 2+2?", "turn": "t1"},
    {"role": "assistant", "tool_calls": [{"id": "c1", "name": "Calc_add", "arguments": "{\"a\": 2,\n \"b\": 2}"}], "turn": "t1"},
    {"role": "tool", "tool_call_id": "c1", "name": "Calc_add", "text": "4", "turn": "t1"},
    {"role": "assistant", "text": "It is 4.\nSurely.", "turn": "t1"},
    {"role": "user", "text": "and 3+3?", "turn": "t2"},
    {"role": "assistant", "text": "Let me see.", "tool_calls": [{"id": "c2", "name": "Calc_add", "arguments": "{}"}, {"id": "c3", "name": "Slow_wait", "arguments": "{}"}], "turn": "t2"},
    {"role": "tool", "tool_call_id": "c2", "name": "Calc_add", "text": "no arguments", "is_error": true, "turn": "t2"}
  ],
  "turns": [{"id": "t1", "from": "Session:dev:s", "started": "2026-12-07T10:00:00Z", "ended": "2026-12-07T10:00:05Z", "rounds": 2, "usage": {"input_tokens": 30, "output_tokens": 12}}],
  "current": {"id": "t2", "from": "Session:dev:s", "started": "2026-12-07T10:01:00Z", "deadline": "2026-12-07T10:06:00Z", "start": 4, "rounds": 1, "usage": {"input_tokens": 20, "output_tokens": 7}},
  "usage": {"input_tokens": 50, "output_tokens": 19}
}`

// startModelSilo is startSilo with a type Model whose conversation skill
// answers recordJSON (Model:empty, an empty record).
func startModelSilo(t *testing.T) *silo {
	t.Helper()
	reg := grain.NewRegistry()
	err := reg.Register("Model", func(h grain.Host) (grain.Agent, error) {
		return agent{h, func(h grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			if m.MessageType != "conversation" {
				return m.Response(), nil
			}
			if h.Address().Alias == "empty" {
				return grain.JSONReply(m, struct {
					Usage struct{} `json:"usage"`
				}{})
			}
			r := m.Response()
			r.Data, r.DataType = []byte(recordJSON), grain.JSONType
			return r, nil
		}}, nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[struct{}, any]("conversation", "The record.").Interleaving()}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startSiloWith(t, lis, reg)
}

// conversation prints each turn with its messages, the one in progress
// marked running (and its call without a result), the tokens of each and
// in total; -o json prints the record as it came; an agent that is not a
// model agent is refused before anything is sent to it.
func TestConversation(t *testing.T) {
	s := startModelSilo(t)
	at := func(s string) string {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return localTime(tm)
	}
	want := `turn t1 ` + at("2026-12-07T10:00:00Z") + ` from Session:dev:s: 2 model calls, tokens 30 in, 12 out, answered
  user: what is 2+2?
  model calls Calc_add {"a": 2, "b": 2} [c1]
  tool Calc_add [c1]: 4
  model: It is 4.
    Surely.
turn t2 running since ` + at("2026-12-07T10:01:00Z") + ` from Session:dev:s: 1 model call, tokens 20 in, 7 out so far
  user: and 3+3?
  model: Let me see.
  model calls Calc_add {} [c2]
  model calls Slow_wait {} [c3]
  tool Slow_wait [c3]: (running)
  tool Calc_add [c2] failed: no arguments
total: 1 turns ended, tokens 50 in, 19 out
`
	out, errOut, code := runClient(t, s.addr, "conversation", "Model:a")
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("conversation: code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	out, _, code = runClient(t, s.addr, "-o", "json", "conversation", "Model:a")
	if code != 0 || compactJSON(t, out) != compactJSON(t, recordJSON) {
		t.Fatalf("conversation -o json: code %d, %s", code, out)
	}
	if out, _, code := runClient(t, s.addr, "conversation", "Model:empty"); code != 0 || out != "none\n" {
		t.Fatalf("conversation of an empty record: code %d, %q", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"conversation", "Echo:x"}, 2, "Echo:x is not a model agent"},
		{[]string{"conversation", "Nope:x"}, 3, "NotFound"},
		{[]string{"conversation"}, 2, "want one AGENT"},
		{[]string{"conversation", "Model:a", "Model:b"}, 2, "want one AGENT"},
	} {
		if _, errOut, code := runClient(t, s.addr, c.args...); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.says)
		}
	}
}

// Long tool results are cut unless --full.
func TestClipText(t *testing.T) {
	if got := clipText("héllo wörld", 5); got != "héllo... (7 more bytes; --full prints them)" {
		t.Fatalf("clipText = %q", got)
	}
	if got := clipText("short", 5); got != "short" {
		t.Fatalf("clipText = %q", got)
	}
}
