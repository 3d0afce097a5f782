package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/examples/internal/exampletest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// TestAssistant runs the program against a fake model, as the README's
// llm:run says, and asks Assistant about the weather: the model calls the
// tool ask_Weather, the agent asks Weather:rome, and the model's answer,
// made of the tool's result, is the reply.
func TestAssistant(t *testing.T) {
	block := testutil.DocBlock(t, "examples/llm/README.md", "llm:run")
	for _, want := range []string{"OPENAI_BASE_URL=", "OPENAI_API_KEY=", "go run ./examples/llm &", `ask Assistant:a "What is the weather in Rome tomorrow?"`} {
		if !strings.Contains(block, want) {
			t.Fatalf("examples/llm/README.md llm:run lacks %q", want)
		}
	}
	// The model: to the user's question, a call of ask_Weather; to the
	// tool's result, an answer made of it.
	model := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		last := r.LastMessage()
		if last.Role == "tool" {
			return fakemodel.Step{Text: "The weather agent says: " + last.Data}
		}
		return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "call_1", Name: "ask_Weather", Arguments: `{"agent": "rome", "text": "tomorrow"}`}}}
	})
	defer model.Close()
	p := exampletest.Start(t, []string{"OPENAI_BASE_URL=" + model.OpenAIURL(), "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"})

	c, err := client.Dial(t.Context(), []string{p.Gateway}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Ask(t.Context(), "Assistant:a", &client.Message{Message: "What is the weather in Rome tomorrow?"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "The weather agent says: Rome: sunny, 24°C"; r.Message != want {
		t.Errorf("Assistant answered %q, want %q", r.Message, want)
	}

	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model got %d requests, want 2 (the question, then the tool's result)", len(reqs))
	}
	first, second := reqs[0], reqs[1]
	if first.Model != "fake-model" || first.Header.Get("Authorization") != "Bearer test-key" || len(first.Tools) != 1 || first.Tools[0] != "ask_Weather" {
		t.Errorf("first request: model %q, auth %q, tools %v", first.Model, first.Header.Get("Authorization"), first.Tools)
	}
	last := second.LastMessage()
	if last.Role != "tool" || last.ToolCallID != "call_1" || last.Data != "Rome: sunny, 24°C" {
		t.Errorf("second request's last message: %+v, want the tool's result for call_1", last)
	}
}
