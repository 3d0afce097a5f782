package llmtest_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// StatusIn and StatusOut are the typed skill status of Orders, the agent
// type the model agent's tool asks.
type StatusIn struct {
	ID string `json:"id"`
}

type StatusOut struct {
	Status string `json:"status"`
}

// orders is Orders, stubbed: it keeps the ids it is asked about.
type orders struct {
	mu    sync.Mutex
	asked []string
}

func (o *orders) stub(env *graintest.Env) {
	env.Stub("Orders", grain.TypedHandler(func(ctx context.Context, in StatusIn) (StatusOut, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.asked = append(o.asked, in.ID)
		return StatusOut{Status: "shipped"}, nil
	}), grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[StatusIn, StatusOut]("status", "An order's status.")}})
}

func (o *orders) ids() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.asked)
}

// model is an llm.Model served by srv, with provider's API.
func model(srv *llmtest.Server, provider string) llm.Model {
	url := srv.URL()
	if provider == llm.ProviderOpenAI {
		url = srv.OpenAIURL()
	}
	return llm.Model{Provider: provider, BaseURL: url, Name: "test-model"}
}

// A model agent in a graintest Env, on each API, streamed or not: the
// script's tool call is an Ask to the stubbed Orders, with the arguments'
// input as the skill's; the tool's result goes back to the model, whose
// answer is the reply. The requests hold the system prompt, the tool
// offered with its schema, and the call's result under its id; the test's
// session got the turn's progress (and, streamed, the answer's text).
func TestModelAgentInGraintest(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		for _, stream := range []bool{false, true} {
			name := provider
			if stream {
				name += "/streamed"
			}
			t.Run(name, func(t *testing.T) {
				env := graintest.New(t)
				srv := llmtest.New(
					llmtest.Step{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "Orders_status", Arguments: `{"agent": "shop", "input": {"id": "42"}}`}}},
					llmtest.Step{Text: "Order 42 has shipped."},
				)
				defer srv.Close()
				o := &orders{}
				o.stub(env)
				def := llm.Definition{
					Type:         "Helper",
					Model:        model(srv, provider),
					SystemPrompt: "You answer questions about orders.",
					Tools:        []llm.ToolRef{{Agent: "Orders"}},
				}
				if err := llm.Register(env.Registry, def, llm.WithClock(env), llm.WithStreaming(stream)); err != nil {
					t.Fatal(err)
				}
				got, err := env.AskText(t.Context(), "Helper:h", "Where is order 42?")
				if err != nil || got != "Order 42 has shipped." {
					t.Fatalf("Helper = %q, %v", got, err)
				}
				if ids := o.ids(); len(ids) != 1 || ids[0] != "42" {
					t.Errorf("Orders was asked about %q, want 42 once", ids)
				}
				reqs := srv.Requests()
				if len(reqs) != 2 || srv.Left() != 0 {
					t.Fatalf("%d requests, %d steps left; want 2 and 0", len(reqs), srv.Left())
				}
				first, second := reqs[0], reqs[1]
				if first.API != provider || first.Stream != stream || first.Model != "test-model" || first.System != def.SystemPrompt || first.LastMessage().Text != "Where is order 42?" {
					t.Errorf("first request: %+v", first)
				}
				if !slices.Equal(first.Tools, []string{"Orders_status"}) {
					t.Errorf("tools offered: %v", first.Tools)
				}
				var schema struct {
					Properties map[string]json.RawMessage `json:"properties"`
				}
				if err := json.Unmarshal(first.Schemas["Orders_status"], &schema); err != nil || schema.Properties["agent"] == nil || schema.Properties["input"] == nil {
					t.Errorf("Orders_status's schema: %s", first.Schemas["Orders_status"])
				}
				if m := second.Messages[len(second.Messages)-2]; m.Role != "assistant" || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "c1" {
					t.Errorf("the model's call, sent back: %+v", m)
				}
				if last := second.LastMessage(); last.Role != "tool" || last.ToolCallID != "c1" || last.Data != `{"status":"shipped"}` || last.IsError {
					t.Errorf("the tool's result: %+v", last)
				}
				var progress, text string
				for _, m := range env.Pushed() {
					switch m.MessageType {
					case llm.ProgressType:
						progress += m.Message + "\n"
					case llm.ProgressDelta:
						text += m.Message
					}
				}
				if progress == "" {
					t.Error("no progress pushed to the test's session")
				}
				if want := ""; stream {
					if want = "Let me look.Order 42 has shipped."; text != want {
						t.Errorf("streamed text %q, want %q", text, want)
					}
				} else if text != want {
					t.Errorf("text %q pushed without streaming", text)
				}
			})
		}
	}
}

// The script's errors reach the agent: a 500 (the SDK not retrying it)
// and a stream cut midway each fail the turn, Unavailable; the caller's
// retry, with the same idempotency key, resumes the turn, and the next
// step answers it. Three requests, one per step.
func TestModelAgentErrors(t *testing.T) {
	env := graintest.New(t)
	srv := llmtest.New(
		llmtest.Step{Status: 500, ErrorMessage: "overloaded"},
		llmtest.Step{Text: "A long answer, cut short", CutStream: true},
		llmtest.Step{Text: "A long answer, whole."},
	)
	defer srv.Close()
	def := llm.Definition{Type: "Helper", Model: model(srv, llm.ProviderAnthropic)}
	if err := llm.Register(env.Registry, def, llm.WithClock(env), llm.WithStreaming(true), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	ask := func() (*grain.Message, error) {
		return env.Ask(t.Context(), "Helper:h", &grain.Message{Message: "Tell me a story.", IdempotencyKey: "k1"})
	}
	for i, want := range []string{"overloaded", "unexpected EOF"} {
		if _, err := ask(); errs.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), want) {
			t.Fatalf("attempt %d: %v, want Unavailable saying %q", i+1, err, want)
		}
	}
	if r, err := ask(); err != nil || r.Message != "A long answer, whole." {
		t.Fatalf("attempt 3: %v, %v", r, err)
	}
	if n, left := srv.Served(), srv.Left(); n != 3 || left != 0 {
		t.Errorf("%d requests, %d steps left; want 3, 0", n, left)
	}
	for i := range 3 {
		if n := srv.Count(i); n != 1 {
			t.Errorf("step %d answered %d requests, want 1", i, n)
		}
	}
}
