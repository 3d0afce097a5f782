package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/fakemodel"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/memory"
)

// runtimeWith starts a runtime with reg's types (and the model type of def).
func runtimeWith(t *testing.T, reg *grain.Registry, def llm.Definition) *grain.Runtime {
	t.Helper()
	if err := llm.Register(reg, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = testutil.Logger()
	cfg.State = grain.NewMemoryStateStore()
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// memory: true gives the model the agent's working memory.
func TestMemoryTools(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "p", Name: "memory_put", Arguments: `{"key": "plan", "text": "buy milk", "category": "todo"}`}}},
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "g", Name: "memory_get", Arguments: `{"key": "plan"}`}, {ID: "s", Name: "memory_search", Arguments: `{"text": "milk"}`}}},
		fakemodel.Step{Text: "noted"},
	)
	defer srv.Close()
	reg := grain.NewRegistry()
	if err := memory.Register(reg, memory.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = []llm.ToolRef{{Memory: true}}
	rt := runtimeWith(t, reg, def)
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "remember to buy milk"})
	if err != nil || r.Message != "noted" {
		t.Fatalf("%v %v", r, err)
	}
	if tools := srv.Requests()[0].Tools; strings.Join(tools, ",") != "memory_put,memory_get,memory_search" {
		t.Errorf("tools %v", tools)
	}
	results := map[string]string{}
	for _, m := range srv.Requests()[2].Messages {
		if m.Role == "tool" {
			results[m.ToolCallID] = m.Text
		}
	}
	if !strings.HasPrefix(results["p"], `kept "plan"`) || !strings.Contains(results["g"], `"text":"buy milk"`) || !strings.Contains(results["s"], "buy milk") {
		t.Errorf("results %v", results)
	}
}

// A tool that asks the model agent back, within the turn's call chain,
// is refused (the agent is in its turn), and the model sees the refusal.
func TestToolAsksBack(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "b", Name: "ask_Caller", Arguments: `{"agent": "x", "text": "hello"}`}}},
		fakemodel.Step{Text: "ok"},
	)
	defer srv.Close()
	reg := grain.NewRegistry()
	if err := reg.Register("Caller", func(h grain.Host) (grain.Agent, error) { return backCaller{h}, nil }); err != nil {
		t.Fatal(err)
	}
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = []llm.ToolRef{{Agent: "Caller"}}
	rt := runtimeWith(t, reg, def)
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "go"})
	if err != nil || r.Message != "ok" {
		t.Fatalf("%v %v", r, err)
	}
	if got := srv.Requests()[1].LastMessage(); !got.IsError || !strings.Contains(got.Text, "FailedPrecondition") || !strings.Contains(got.Text, "in a turn already") {
		t.Errorf("result %+v", got)
	}
}

// backCaller asks Helper:h (its caller) with the text it got.
type backCaller struct{ h grain.Host }

func (b backCaller) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if _, err := b.h.Ask(ctx, "Helper:h", grain.Text(m.Message)); err != nil {
		return nil, err
	}
	return m.Response(), nil
}
