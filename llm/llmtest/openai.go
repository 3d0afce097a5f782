package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// openAIRequest is what the server reads of a chat completion request.
type openAIRequest struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Messages            []openAIMessage `json:"messages"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type openAIMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// contentText reads a content that is a string or an array of parts.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func parseOpenAI(body []byte, req *Request) error {
	var in openAIRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return err
	}
	req.Model, req.Stream = in.Model, in.Stream
	req.MaxTokens = in.MaxCompletionTokens
	if req.MaxTokens == 0 {
		req.MaxTokens = in.MaxTokens
	}
	for _, m := range in.Messages {
		if m.Role == "system" || m.Role == "developer" {
			req.System += contentText(m.Content)
			continue
		}
		msg := Message{Role: m.Role, Text: contentText(m.Content), ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	req.Schemas = make(map[string]json.RawMessage)
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
		req.Schemas[t.Function.Name] = t.Function.Parameters
	}
	return nil
}

func openAIFinish(step Step) string {
	switch {
	case step.StopReason == Stop:
		return "length"
	case step.StopReason != "":
		return step.StopReason
	case len(step.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

func openAIUsage(step Step) map[string]any {
	return map[string]any{"prompt_tokens": step.InputTokens, "completion_tokens": step.OutputTokens, "total_tokens": step.InputTokens + step.OutputTokens}
}

func openAICompletion(req Request, step Step) map[string]any {
	msg := map[string]any{"role": "assistant", "content": step.Text}
	if step.Text == "" && len(step.ToolCalls) > 0 {
		msg["content"] = nil
	}
	if len(step.ToolCalls) > 0 {
		var calls []any
		for _, c := range step.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": openAIFinish(step), "message": msg, "logprobs": nil}},
		"usage":   openAIUsage(step),
	}
}

func streamOpenAI(w http.ResponseWriter, req Request, step Step) {
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
	}
	var events []map[string]any
	events = append(events, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, part := range halves(step.Text) {
		if part != "" {
			events = append(events, chunk(map[string]any{"content": part}, nil))
		}
	}
	for i, c := range step.ToolCalls {
		events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""},
		}}}, nil))
		for _, part := range halves(c.Arguments) {
			events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": part},
			}}}, nil))
		}
	}
	events = append(events, chunk(map[string]any{}, openAIFinish(step)))
	events = append(events, map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": req.Model,
		"choices": []any{}, "usage": openAIUsage(step),
	})
	if step.CutStream {
		for _, e := range events[:(len(events)+1)/2] {
			s.event("", e)
		}
		s.cut()
		return
	}
	for _, e := range events {
		s.event("", e)
	}
	s.raw("data: [DONE]\n\n")
}
