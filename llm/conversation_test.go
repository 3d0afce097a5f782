package llm_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// words is a text of n bytes that names itself.
func words(name string, n int) string {
	return name + " " + strings.Repeat("x", n-len(name)-1)
}

// A conversation over its token budget loses its oldest turns before the
// next turn's first model request, down to half the budget: dropped, or
// summarised by the model (the summary then rides in the system prompt of
// every later request, and its tokens are counted).
func TestConversationBudget(t *testing.T) {
	for _, trim := range []string{llm.TrimDrop, llm.TrimSummarize} {
		t.Run(trim, func(t *testing.T) {
			env := graintest.New(t)
			srv := llmtest.New(
				llmtest.Step{Text: words("answer-one", 200)},
				llmtest.Step{Text: words("answer-two", 100)},
			)
			defer srv.Close()
			def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
			def.Tools = nil
			// The first turn is 400 bytes (100 tokens), the second 200 (50):
			// past a budget of 120 tokens, the first goes, leaving 50 of the
			// 60 that half the budget allows.
			def.Conversation = llm.ConversationSettings{MaxTokens: 120, Trim: trim}
			registerHelper(t, env, def)
			ctx := t.Context()
			const agent = "Helper:h"
			for _, q := range []string{words("question-one", 200), words("question-two", 100)} {
				if _, err := env.AskText(ctx, agent, q); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(srv.Requests()); n != 2 {
				t.Fatalf("%d model requests for two turns under the budget, want 2", n)
			}
			if trim == llm.TrimSummarize {
				srv.Add(llmtest.Step{Text: "SUMMARY: the first question was answered.", InputTokens: 100, OutputTokens: 10})
			}
			srv.Add(llmtest.Step{Text: "three"})
			if got, err := env.AskText(ctx, agent, "question-three"); err != nil || got != "three" {
				t.Fatalf("third turn: %q %v", got, err)
			}
			reqs := srv.Requests()
			last := reqs[len(reqs)-1]
			for _, m := range last.Messages {
				if strings.HasPrefix(m.Text, "question-one") || strings.HasPrefix(m.Text, "answer-one") {
					t.Errorf("the third turn's request still carries the first turn: %.20q", m.Text)
				}
			}
			if len(last.Messages) != 3 || !strings.HasPrefix(last.Messages[0].Text, "question-two") {
				t.Errorf("the third turn's request: %d messages, want the second turn's two and the question", len(last.Messages))
			}
			c := conversationOf(t, env, agent)
			if len(c.Messages) != 4 || len(c.Turns) != 3 {
				t.Errorf("record: %d messages and %d turns, want 4 and 3", len(c.Messages), len(c.Turns))
			}
			switch trim {
			case llm.TrimDrop:
				if len(reqs) != 3 || c.Summary != nil || last.System != "You keep totals." {
					t.Errorf("drop: %d requests, summary %+v, system %q", len(reqs), c.Summary, last.System)
				}
			case llm.TrimSummarize:
				if len(reqs) != 4 {
					t.Fatalf("%d model requests, want 4 (one summarising)", len(reqs))
				}
				sum := reqs[2]
				if !strings.HasPrefix(sum.System, "You summarise") || len(sum.Tools) != 0 ||
					!strings.Contains(sum.LastMessage().Text, "question-one") || strings.Contains(sum.LastMessage().Text, "question-two") {
					t.Errorf("the summarising request: system %.30q, tools %v, text %.200q", sum.System, sum.Tools, sum.LastMessage().Text)
				}
				if !strings.HasPrefix(last.System, "You keep totals.") || !strings.Contains(last.System, "SUMMARY: the first question was answered.") {
					t.Errorf("the request after the summary has system %q", last.System)
				}
				s := c.Summary
				if s == nil || s.Text != "SUMMARY: the first question was answered." || s.Turns != 1 || s.Through != c.Turns[0].ID || s.Turn != c.Turns[2].ID || s.Usage.InputTokens != 100 {
					t.Fatalf("summary %+v", s)
				}
				if c.Turns[2].Usage.InputTokens < 100 || c.Usage.OutputTokens < 10 {
					t.Errorf("the summary's tokens are not counted: turn %+v, total %+v", c.Turns[2].Usage, c.Usage)
				}
			}
		})
	}
}

// The summary's call is refused as a bad request: the turns are dropped
// instead, and the turn goes on.
func TestConversationSummaryRefused(t *testing.T) {
	env := graintest.New(t)
	srv := llmtest.New(
		llmtest.Step{Text: words("answer-one", 400)},
		llmtest.Step{Status: 400, ErrorMessage: "no summaries here"},
		llmtest.Step{Text: "two"},
	)
	defer srv.Close()
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = nil
	def.Conversation = llm.ConversationSettings{MaxTokens: 100, Trim: llm.TrimSummarize}
	registerHelper(t, env, def)
	ctx := t.Context()
	if _, err := env.AskText(ctx, "Helper:h", words("question-one", 400)); err != nil {
		t.Fatal(err)
	}
	if got, err := env.AskText(ctx, "Helper:h", "question-two"); err != nil || got != "two" {
		t.Fatalf("second turn: %q %v", got, err)
	}
	c := conversationOf(t, env, "Helper:h")
	if c.Summary != nil || len(c.Messages) != 2 || c.Messages[0].Text != "question-two" {
		t.Errorf("after a refused summary: summary %+v, %d messages", c.Summary, len(c.Messages))
	}
}

// The forget skill: a stranger is refused, a turn waiting for approval
// keeps it, and the owner deletes the record (its state is gone).
func TestForget(t *testing.T) {
	env := graintest.New(t, graintest.WithPrincipal("alice"))
	srv := llmtest.New(
		llmtest.Step{Text: "hello"},
	)
	defer srv.Close()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = nil
	registerHelper(t, env, def)
	ctx := t.Context()
	const agent = "Helper:alice:h"
	if _, err := env.AskText(ctx, agent, "hi"); err != nil {
		t.Fatal(err)
	}
	if data, _ := env.State(agent); len(data) == 0 {
		t.Fatal("no record after a turn")
	}
	_, err := env.Ask(ctx, agent, &grain.Message{From: "Session:mallory:s", MessageType: llm.SkillForget, DataType: grain.JSONType, Data: []byte(`{}`)})
	if errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "nothing was deleted") {
		t.Fatalf("forget by a stranger: %v, want PermissionDenied", err)
	}
	r, err := env.Ask(ctx, agent, &grain.Message{MessageType: llm.SkillForget, DataType: grain.JSONType, Data: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.Data), `"messages":2`) || !strings.Contains(string(r.Data), `"turns":1`) {
		t.Errorf("forgotten: %s", r.Data)
	}
	if data, etag := env.State(agent); len(data) != 0 || etag != "" {
		t.Errorf("state after forget: %q %q", data, etag)
	}
	if c := conversationOf(t, env, agent); len(c.Messages) != 0 || len(c.Turns) != 0 {
		t.Errorf("conversation after forget: %+v", c)
	}
	srv.Add(llmtest.Step{Text: "hello again"})
	if got, err := env.AskText(ctx, agent, "hi"); err != nil || got != "hello again" {
		t.Fatalf("a turn after forget: %q %v", got, err)
	}
	if reqs := srv.Requests(); len(reqs[len(reqs)-1].Messages) != 1 {
		t.Errorf("the turn after forget sent %d messages, want its own one", len(reqs[len(reqs)-1].Messages))
	}
}

// A turn that waits for approval cannot be forgotten.
func TestForgetWaitingTurn(t *testing.T) {
	env := graintest.New(t)
	srv := llmtest.New(llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 1)}})
	defer srv.Close()
	env.Register("Counter", func(h grain.Host) (grain.Agent, error) {
		return &counter{n: grain.NewState[int](h)}, nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[AddIn, AddOut]("add", "Add n to the total.")}})
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Approval = []string{"Counter_add"}
	registerHelper(t, env, def)
	ctx := t.Context()
	r, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "add one"})
	if err != nil || r.MessageType != llm.InputRequired {
		t.Fatalf("a turn that waits: %v %v", r, err)
	}
	_, err = env.Ask(ctx, "Helper:h", &grain.Message{MessageType: llm.SkillForget, DataType: grain.JSONType, Data: []byte(`{}`)})
	if errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing was deleted") {
		t.Fatalf("forget while a turn waits: %v, want FailedPrecondition", err)
	}
	if c := conversationOf(t, env, "Helper:h"); c.Current == nil || len(c.Current.Approvals) != 1 {
		t.Errorf("the waiting turn after a refused forget: %+v", c.Current)
	}
}

// Retention: the activation's end registers the reminder, due when the
// retention passes after the last turn; a turn meanwhile moves it on; a
// tick past it deletes the conversation and its reminder.
func TestConversationRetention(t *testing.T) {
	env := graintest.New(t)
	srv := llmtest.New(llmtest.Step{Text: "one"}, llmtest.Step{Text: "two"})
	defer srv.Close()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = nil
	def.Conversation.Retention = llm.Duration(time.Hour)
	registerHelper(t, env, def)
	ctx := t.Context()
	const agent = "Helper:h"
	addr, err := grain.Resolve(agent, "tester")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.AskText(ctx, agent, "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Runtime.Deactivate(ctx, addr); err != nil {
		t.Fatal(err)
	}
	rs := env.Reminders(agent)
	if len(rs) != 1 || rs[0].Name != llm.RetentionReminder {
		t.Fatalf("reminders after the activation ended: %+v, want the retention reminder", rs)
	}
	env.Advance(30 * time.Minute)
	if _, err := env.AskText(ctx, agent, "second"); err != nil {
		t.Fatal(err)
	}
	env.Advance(31 * time.Minute) // the reminder fires: the last turn is 31 minutes old
	if data, _ := env.State(agent); len(data) == 0 {
		t.Fatal("the conversation was deleted 31 minutes after its last turn, with a retention of an hour")
	}
	// The tick, handled before a request queued behind it, moved the
	// reminder on: due when the hour since the last turn (30 minutes in)
	// passes. (Its tick count starts again with the reminder registered
	// anew, so the count says nothing.)
	if _, err := env.Ask(ctx, agent, &grain.Message{MessageType: barrier}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("barrier: %v", err)
	}
	if rs := env.Reminders(agent); len(rs) != 1 || !rs[0].Due.Equal(env.Now().Add(29*time.Minute)) {
		t.Fatalf("reminders after the tick: %+v, want the retention reminder due in 29 minutes (now %v)", rs, env.Now())
	}
	env.Advance(30 * time.Minute) // past the hour since the last turn
	if c := conversationOf(t, env, agent); len(c.Messages) != 0 {
		t.Fatalf("the conversation is kept past its retention: %d messages", len(c.Messages))
	}
	if data, _ := env.State(agent); len(data) != 0 {
		t.Errorf("state past retention: %q", data)
	}
	if rs := env.Reminders(agent); len(rs) != 0 {
		t.Errorf("reminders after the conversation expired: %+v", rs)
	}
}

// Bad conversation settings are refused, naming the field.
func TestConversationSettingsInvalid(t *testing.T) {
	for field, set := range map[string]llm.ConversationSettings{
		"conversation.max_tokens": {MaxTokens: -1},
		"conversation.trim":       {Trim: "squash"},
		"conversation.retention":  {Retention: llm.Duration(time.Second)},
	} {
		def := definition(llm.ProviderOpenAI, "http://127.0.0.1:1")
		def.Conversation = set
		if err := def.Validate(); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: %v, want InvalidArgument naming %s", set, err, field)
		}
	}
}
