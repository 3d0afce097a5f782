package llm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// anthropicProvider is Anthropic's Messages API, through
// github.com/anthropics/anthropic-sdk-go.
type anthropicProvider struct {
	client anthropic.Client
}

func newAnthropic(m Model, key string, cfg providerConfig) *anthropicProvider {
	opts := []option.RequestOption{option.WithMaxRetries(cfg.maxRetries), option.WithAPIKey(key)}
	if m.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(m.BaseURL))
	}
	if cfg.httpClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.httpClient))
	}
	return &anthropicProvider{client: anthropic.NewClient(opts...)}
}

func (p *anthropicProvider) params(req *Request) anthropic.MessageNewParams {
	params := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: int64(req.MaxOutputTokens)}
	if params.MaxTokens <= 0 {
		params.MaxTokens = DefaultMaxTokens
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	var results []anthropic.ContentBlockParamUnion // tool results waiting for their user message
	flush := func() {
		if len(results) > 0 {
			params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
			results = nil
		}
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleTool:
			results = append(results, anthropic.NewToolResultBlock(m.ToolCallID, m.Text, m.IsError))
		case RoleUser:
			flush()
			params.Messages = append(params.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Text)))
		case RoleAssistant:
			flush()
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, toolInput(c.Arguments), c.Name))
			}
			if len(blocks) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock("(no answer)"))
			}
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		}
	}
	flush()
	for _, t := range req.Tools {
		var schema map[string]any
		_ = json.Unmarshal(t.Schema, &schema) // checked when the tool set was built
		in := anthropic.ToolInputSchemaParam{Properties: schema["properties"]}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		for k, v := range schema {
			if k != "properties" && k != "required" && k != "type" {
				if in.ExtraFields == nil {
					in.ExtraFields = make(map[string]any)
				}
				in.ExtraFields[k] = v
			}
		}
		tp := &anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: tp})
	}
	return params
}

// toolInput is a recorded call's arguments as a tool_use block's input:
// the JSON itself, or (arguments that were not JSON, from another model)
// an empty object.
func toolInput(args string) any {
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	return map[string]any{}
}

// Complete implements Provider.
func (p *anthropicProvider) Complete(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	params := p.params(req)
	if onDelta == nil {
		res, err := p.client.Messages.New(ctx, params)
		if err != nil {
			return nil, ModelError(ProviderAnthropic, anthropicError(err))
		}
		return anthropicResponse(res), nil
	}
	stream := p.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var acc anthropic.Message
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return nil, errs.Wrap(codes.Unavailable, err, "anthropic model call: the stream does not add up")
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onDelta(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, ModelError(ProviderAnthropic, anthropicError(err))
	}
	if !stopped {
		return nil, errs.New(codes.Unavailable, "anthropic model call: the stream ended before the message did (no message_stop)")
	}
	return anthropicResponse(&acc), nil
}

func anthropicResponse(m *anthropic.Message) *Response {
	r := &Response{
		Model:         string(m.Model),
		APIStopReason: string(m.StopReason),
		Usage:         Usage{InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens},
	}
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			r.Text += b.Text
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	switch m.StopReason {
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		r.StopReason = StopMaxTokens
	case anthropic.StopReasonToolUse:
		r.StopReason = StopToolCalls
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		r.StopReason = StopEnd
	case anthropic.StopReasonRefusal:
		r.StopReason = StopRefusal
	default:
		r.StopReason = StopOther
	}
	if len(r.ToolCalls) > 0 && r.StopReason != StopMaxTokens {
		r.StopReason = StopToolCalls
	}
	return r
}

// anthropicError gives an API error its HTTP status for ModelError.
func anthropicError(err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		return &httpError{status: apiErr.StatusCode, err: err}
	}
	return err
}
