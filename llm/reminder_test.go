package llm_test

import (
	"testing"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// The resume reminder's lifetime: a turn whose model answers at once is
// one write and needs none; the first turn with a tool call registers it
// beside the write of its first step; the activation's next turns use the
// same; the activation's end between turns removes it.
func TestResumeReminderLifetime(t *testing.T) {
	env := graintest.New(t)
	srv := llmtest.New(
		llmtest.Step{Text: "hello"},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 1)}},
		llmtest.Step{Text: "one"},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c2", "a", 1)}},
		llmtest.Step{Text: "two"},
	)
	defer srv.Close()
	env.Register("Counter", func(h grain.Host) (grain.Agent, error) {
		return &counter{n: grain.NewState[int](h)}, nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[AddIn, AddOut]("add", "Add n to the total.")}})
	registerHelper(t, env, definition(llm.ProviderOpenAI, srv.OpenAIURL()))
	ctx := t.Context()
	const agent = "Helper:h"

	if got, err := env.AskText(ctx, agent, "hi"); err != nil || got != "hello" {
		t.Fatalf("a turn without tools: %q %v", got, err)
	}
	if rs := env.Reminders(agent); len(rs) != 0 {
		t.Fatalf("reminders %+v after a turn of one step, want none", rs)
	}
	for _, want := range []string{"one", "two"} {
		if got, err := env.AskText(ctx, agent, "add one"); err != nil || got != want {
			t.Fatalf("a turn with a tool call: %q %v, want %q", got, err, want)
		}
		if rs := env.Reminders(agent); len(rs) != 1 || rs[0].Name != llm.ResumeReminder {
			t.Fatalf("reminders %+v after a turn with a tool call, want the resume reminder", rs)
		}
	}
	if c := conversationOf(t, env, agent); c.Current != nil || len(c.Turns) != 3 {
		t.Fatalf("turns %+v, current %+v; want three ended", c.Turns, c.Current)
	}
	addr, err := grain.Resolve(agent, "tester") // graintest's principal
	if err != nil {
		t.Fatal(err)
	}
	if was, err := env.Runtime.Deactivate(ctx, addr); err != nil || !was {
		t.Fatalf("deactivate: %v %v", was, err)
	}
	if rs := env.Reminders(agent); len(rs) != 0 {
		t.Fatalf("reminders %+v after the activation ended between turns, want none", rs)
	}
}
