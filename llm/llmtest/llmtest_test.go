package llmtest

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openAIClient(s *Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.OpenAIURL()), option.WithAPIKey("test-key"), option.WithMaxRetries(2))
}

func anthropicClient(s *Server) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(2))
}

var weatherTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:       "weather",
	Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
})

// OpenAI's SDK reads a scripted tool call, then (after a 429 with
// Retry-After, which it retries) a streamed text answer; the server
// recorded what it was sent.
func TestOpenAI(t *testing.T) {
	s := New(
		Step{ToolCalls: []ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Rome"}`}}, InputTokens: 7, OutputTokens: 3},
		Step{Status: http.StatusTooManyRequests, RetryAfter: "0"},
		Step{Text: "sunny in Rome"},
	)
	defer s.Close()
	c := openAIClient(s)
	ctx := t.Context()
	params := openai.ChatCompletionNewParams{
		Model:    "fake",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("weather in Rome?")},
		Tools:    []openai.ChatCompletionToolUnionParam{weatherTool},
	}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	msg := res.Choices[0].Message
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "c1" || msg.ToolCalls[0].Function.Arguments != `{"city":"Rome"}` || res.Usage.PromptTokens != 7 || res.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("completion: %+v", res)
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("sunny", "c1"))
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if got := acc.Choices[0].Message.Content; got != "sunny in Rome" {
		t.Errorf("streamed %q", got)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || s.Count(1) != 1 || s.Count(2) != 1 {
		t.Fatalf("%d requests, steps %d %d", len(reqs), s.Count(1), s.Count(2))
	}
	first, last := reqs[0], reqs[2]
	if first.API != "openai" || first.System != "be brief" || first.Model != "fake" || len(first.Tools) != 1 || first.Tools[0] != "weather" || first.Header.Get("Authorization") != "Bearer test-key" {
		t.Errorf("first request: %+v", first)
	}
	if !last.Stream || last.LastMessage().Role != "tool" || last.LastMessage().ToolCallID != "c1" || last.LastMessage().Text != "sunny" || len(last.Messages[1].ToolCalls) != 1 {
		t.Errorf("last request: %+v", last)
	}
}

// Anthropic's SDK reads a streamed tool call and a plain answer; a cut
// stream is an error to it.
func TestAnthropic(t *testing.T) {
	s := New(
		Step{Text: "let me look", ToolCalls: []ToolCall{{ID: "t1", Name: "weather", Arguments: `{"city":"Rome"}`}}},
		Step{Text: "sunny in Rome", OutputTokens: 4},
		Step{Text: "a long answer that is cut", CutStream: true},
	)
	defer s.Close()
	c := anthropicClient(s)
	ctx := t.Context()
	params := anthropic.MessageNewParams{
		Model:     "fake",
		MaxTokens: 100,
		System:    []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Rome?"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "weather", InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"city": map[string]any{"type": "string"}},
		}}}},
	}
	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if len(acc.Content) != 2 || acc.Content[1].Name != "weather" || string(acc.Content[1].Input) != `{"city":"Rome"}` || acc.StopReason != anthropic.StopReasonToolUse {
		t.Fatalf("streamed message: %+v", acc)
	}
	params.Messages = append(params.Messages, acc.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock("t1", "sunny", false)))
	res, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content[0].Text != "sunny in Rome" || res.Usage.OutputTokens != 4 {
		t.Errorf("message: %+v", res)
	}
	cut := c.Messages.NewStreaming(ctx, params)
	for cut.Next() {
	}
	if cut.Err() == nil {
		t.Error("a cut stream read to its end without an error")
	}
	cut.Close()
	reqs := s.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	second := reqs[1]
	if second.API != "anthropic" || second.System != "be brief" || second.Header.Get("Authorization") != "Bearer test-key" {
		t.Errorf("second request: %+v", second)
	}
	if m := second.Messages[1]; m.Role != "assistant" || m.Text != "let me look" || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "t1" {
		t.Errorf("second request's assistant message: %+v", m)
	}
	if m := second.LastMessage(); m.Role != "tool" || m.ToolCallID != "t1" || m.Text != "sunny" {
		t.Errorf("second request's tool result: %+v", m)
	}
	var schema map[string]any
	if err := json.Unmarshal(second.Schemas["weather"], &schema); err != nil || schema["type"] != "object" {
		t.Errorf("weather's schema: %s", second.Schemas["weather"])
	}
}

// A request beyond the script gets a 400 saying so; errors keep their
// status through the SDK.
func TestExhaustedAndErrors(t *testing.T) {
	s := New(Step{Status: http.StatusInternalServerError, ErrorMessage: "boom"})
	defer s.Close()
	c := openai.NewClient(option.WithBaseURL(s.OpenAIURL()), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "fake", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	_, err := c.Chat.Completions.New(t.Context(), params)
	var apiErr *openai.Error
	if !asError(err, &apiErr) || apiErr.StatusCode != 500 {
		t.Fatalf("500: %v", err)
	}
	_, err = c.Chat.Completions.New(t.Context(), params)
	if !asError(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("exhausted: %v", err)
	}
	if reqs := s.Requests(); len(reqs) != 2 || reqs[1].Step != -1 || s.Left() != 0 {
		t.Errorf("requests %+v", reqs)
	}
}

func asError[T error](err error, target *T) bool {
	return err != nil && errors.As(err, target)
}

// Loop answers two conversations, each in the shape of one tool loop (a
// tool call, then an answer quoting the tool's result), each answer
// after its latency; with recording off the server keeps no requests but
// counts them.
func TestLoop(t *testing.T) {
	const latency = 20 * time.Millisecond
	s := NewFunc(Loop{Tool: "count", Arguments: `{"n":1}`, Latency: latency}.Respond)
	defer s.Close()
	s.SetRecording(false)
	c := openAIClient(s)
	ctx := t.Context()
	for _, name := range []string{"a", "b"} {
		params := openai.ChatCompletionNewParams{
			Model:    "fake",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count for " + name)},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
				Name: "count", Parameters: openai.FunctionParameters{"type": "object"},
			})},
		}
		start := time.Now()
		res, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < latency {
			t.Errorf("answered in %v, before its latency %v", took, latency)
		}
		msg := res.Choices[0].Message
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "count" || msg.ToolCalls[0].Function.Arguments != `{"n":1}` {
			t.Fatalf("first response: %+v", msg)
		}
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("7 "+name, msg.ToolCalls[0].ID))
		res, err = c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Choices[0].Message; got.Content != "done: 7 "+name || len(got.ToolCalls) != 0 || res.Choices[0].FinishReason != "stop" {
			t.Fatalf("second response: %+v", got)
		}
	}
	if n, kept := s.Served(), len(s.Requests()); n != 4 || kept != 0 {
		t.Errorf("served %d, kept %d; want 4, 0", n, kept)
	}
}
