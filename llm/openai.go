package llm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// openAIProvider is any OpenAI-compatible chat completions API, through
// github.com/openai/openai-go.
type openAIProvider struct {
	client openai.Client
}

func newOpenAI(m Model, key string, cfg providerConfig) *openAIProvider {
	opts := []option.RequestOption{option.WithMaxRetries(cfg.maxRetries)}
	if m.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(m.BaseURL))
	}
	// An explicit key (or none: a local server) instead of the SDK's own
	// reading of OPENAI_API_KEY: the definition says which variable.
	opts = append(opts, option.WithAPIKey(key))
	if cfg.httpClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.httpClient))
	}
	return &openAIProvider{client: openai.NewClient(opts...)}
}

func (p *openAIProvider) params(req *Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{Model: req.Model}
	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Text))
		case RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Text, m.ToolCallID))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Text)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	for _, t := range req.Tools {
		var schema map[string]any
		_ = json.Unmarshal(t.Schema, &schema) // checked when the tool set was built
		fd := openai.FunctionDefinitionParam{Name: t.Name, Parameters: openai.FunctionParameters(schema)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if req.MaxOutputTokens > 0 {
		params.MaxCompletionTokens = openai.Int(int64(req.MaxOutputTokens))
	}
	return params
}

// Complete implements Provider.
func (p *openAIProvider) Complete(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	params := p.params(req)
	if onDelta == nil {
		res, err := p.client.Chat.Completions.New(ctx, params)
		if err != nil {
			return nil, ModelError(ProviderOpenAI, openAIError(err))
		}
		if len(res.Choices) == 0 {
			return nil, errs.New(codes.Unavailable, "openai model call: the response has no choice")
		}
		return openAIResponse(res.Model, res.Choices[0].Message, string(res.Choices[0].FinishReason), res.Usage), nil
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := p.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			if c.Index == 0 && c.Delta.Content != "" {
				onDelta(c.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, ModelError(ProviderOpenAI, openAIError(err))
	}
	if len(acc.Choices) == 0 || acc.Choices[0].FinishReason == "" {
		return nil, errs.New(codes.Unavailable, "openai model call: the stream ended before the response did (no finish reason)")
	}
	return openAIResponse(acc.Model, acc.Choices[0].Message, string(acc.Choices[0].FinishReason), acc.Usage), nil
}

func openAIResponse(model string, msg openai.ChatCompletionMessage, finish string, usage openai.CompletionUsage) *Response {
	r := &Response{
		Text:          msg.Content,
		Model:         model,
		APIStopReason: finish,
		Usage:         Usage{InputTokens: usage.PromptTokens, OutputTokens: usage.CompletionTokens},
	}
	for _, c := range msg.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	switch {
	case finish == "length":
		r.StopReason = StopMaxTokens
	case len(r.ToolCalls) > 0:
		r.StopReason = StopToolCalls
	case finish == "stop":
		r.StopReason = StopEnd
	case finish == "content_filter" || msg.Refusal != "":
		r.StopReason = StopRefusal
		if r.Text == "" {
			r.Text = msg.Refusal
		}
	default:
		r.StopReason = StopOther
	}
	return r
}

// openAIError gives an API error its HTTP status for ModelError.
func openAIError(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return &httpError{status: apiErr.StatusCode, msg: apiErr.Message, err: err}
	}
	return err
}
