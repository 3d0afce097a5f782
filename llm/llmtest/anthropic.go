package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// anthropicRequest is what the server reads of a Messages request.
type anthropicRequest struct {
	Model     string          `json:"model"`
	Stream    bool            `json:"stream"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func parseAnthropic(body []byte, req *Request) error {
	var in anthropicRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return err
	}
	req.Model, req.Stream, req.MaxTokens = in.Model, in.Stream, in.MaxTokens
	req.System = contentText(in.System)
	for _, m := range in.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			req.Messages = append(req.Messages, Message{Role: m.Role, Text: s})
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return err
		}
		msg := Message{Role: m.Role}
		var text strings.Builder
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
			case "tool_result":
				req.Messages = append(req.Messages, Message{Role: "tool", Text: contentText(b.Content), ToolCallID: b.ToolUseID, IsError: b.IsError})
			}
		}
		msg.Text = text.String()
		if msg.Text != "" || len(msg.ToolCalls) > 0 || m.Role == "assistant" {
			req.Messages = append(req.Messages, msg)
		}
	}
	req.Schemas = make(map[string]json.RawMessage)
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, t.Name)
		req.Schemas[t.Name] = t.InputSchema
	}
	return nil
}

func anthropicStop(step Step) string {
	switch {
	case step.StopReason != "":
		return step.StopReason
	case len(step.ToolCalls) > 0:
		return "tool_use"
	}
	return "end_turn"
}

// toolInput is a tool call's arguments as Anthropic's input object: the
// arguments themselves if they are JSON, else a string of them (the API
// always sends an object; a script's bad arguments stay visible).
func toolInput(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

func anthropicMessage(req Request, step Step) map[string]any {
	content := []any{}
	if step.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": step.Text})
	}
	for _, c := range step.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": toolInput(c.Arguments)})
	}
	return map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
		"content": content, "stop_reason": anthropicStop(step), "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": step.InputTokens, "output_tokens": step.OutputTokens},
	}
}

func streamAnthropic(w http.ResponseWriter, req Request, step Step) {
	s := newSSE(w)
	type ev struct {
		name string
		v    map[string]any
	}
	var events []ev
	events = append(events, ev{"message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": step.InputTokens, "output_tokens": 1},
	}}})
	index := 0
	if step.Text != "" {
		events = append(events, ev{"content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}}})
		for _, part := range halves(step.Text) {
			events = append(events, ev{"content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": part}}})
		}
		events = append(events, ev{"content_block_stop", map[string]any{"type": "content_block_stop", "index": index}})
		index++
	}
	for _, c := range step.ToolCalls {
		events = append(events, ev{"content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}}})
		for _, part := range halves(string(toolInput(c.Arguments))) {
			events = append(events, ev{"content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}}})
		}
		events = append(events, ev{"content_block_stop", map[string]any{"type": "content_block_stop", "index": index}})
		index++
	}
	events = append(events, ev{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": anthropicStop(step), "stop_sequence": nil}, "usage": map[string]any{"output_tokens": step.OutputTokens}}})
	events = append(events, ev{"message_stop", map[string]any{"type": "message_stop"}})
	if step.CutStream {
		for _, e := range events[:(len(events)+1)/2] {
			s.event(e.name, e.v)
		}
		s.cut()
		return
	}
	for _, e := range events {
		s.event(e.name, e.v)
	}
}
