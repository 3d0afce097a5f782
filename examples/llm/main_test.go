package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/examples/internal/exampletest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// fakeModel is an OpenAI-compatible chat completions server that plays
// a model: to a conversation whose last message is the user's it answers
// with a call of ask_agent, and to one whose last message is the tool's
// result it answers with text made of that result.
type fakeModel struct {
	mu       sync.Mutex
	requests []chatRequest
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	auth string
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
		http.Error(w, "want a chat completion", http.StatusBadRequest)
		return
	}
	req.auth = r.Header.Get("Authorization")
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	var message map[string]any
	switch last.Role {
	case "user":
		message = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function",
			"function": map[string]any{"name": "ask_agent", "arguments": `{"agent": "Weather:rome", "text": "tomorrow"}`},
		}}}
	case "tool":
		message = map[string]any{"role": "assistant", "content": fmt.Sprintf("The weather agent says: %v", last.Content)}
	default:
		http.Error(w, "unexpected last message "+last.Role, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": message}},
	})
}

// TestAssistant runs the program against a fake model, as the README's
// llm:run says, and asks Assistant about the weather: the model calls
// ask_agent, the agent asks Weather:rome, and the model's answer, made of
// the tool's result, is the reply.
func TestAssistant(t *testing.T) {
	block := testutil.DocBlock(t, "examples/llm/README.md", "llm:run")
	for _, want := range []string{"OPENAI_BASE_URL=", "OPENAI_API_KEY=", "go run ./examples/llm &", `ask Assistant:a "What is the weather in Rome tomorrow?"`} {
		if !strings.Contains(block, want) {
			t.Fatalf("examples/llm/README.md llm:run lacks %q", want)
		}
	}
	model := &fakeModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	p := exampletest.Start(t, []string{"OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"})

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

	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.requests) != 2 {
		t.Fatalf("the model got %d requests, want 2 (the question, then the tool's result)", len(model.requests))
	}
	first, second := model.requests[0], model.requests[1]
	if first.Model != "fake-model" || first.auth != "Bearer test-key" || len(first.Tools) != 1 || first.Tools[0].Function.Name != "ask_agent" {
		t.Errorf("first request: model %q, auth %q, tools %+v", first.Model, first.auth, first.Tools)
	}
	last := second.Messages[len(second.Messages)-1]
	if last.Role != "tool" || last.ToolCallID != "call_1" || last.Content != "Rome: sunny, 24°C" {
		t.Errorf("second request's last message: %+v, want the tool's result for call_1", last)
	}
}
