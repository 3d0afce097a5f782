// Command llm is a silo program with an agent that thinks with a language
// model and acts with tools. Assistant sends each request, with the
// conversation so far, to an OpenAI-compatible chat completions API; when
// the model calls a tool, the agent runs it and sends the result back,
// until the model answers. Its one tool, ask_agent, asks another agent of
// the cluster: here Weather, a plain agent, so the model's question about
// the weather becomes an Ask to Weather:<city>.
//
// The model is configured by the environment: OPENAI_BASE_URL (any
// OpenAI-compatible server: OpenAI's, a local llama.cpp or vLLM server, a
// gateway), OPENAI_API_KEY and OPENAI_MODEL (default gpt-5.4-mini). The
// agent keeps its conversation in memory: a later request of the same
// Assistant:owner:alias continues it, until the agent is deactivated.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// maxToolRounds bounds the model's tool calls for one request.
const maxToolRounds = 8

// Assistant answers with a language model that may ask other agents.
type Assistant struct {
	host    grain.Host
	llm     openai.Client
	model   string
	history []openai.ChatCompletionMessageParamUnion
}

// askAgent is the tool the model may call.
var askAgent = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:        "ask_agent",
	Description: openai.String("Ask another agent of the cluster and return its answer. Weather:<city> knows the weather of a city."),
	Parameters: openai.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"agent": map[string]any{"type": "string", "description": "the agent's address, such as Weather:rome"},
			"text":  map[string]any{"type": "string", "description": "what to ask it"},
		},
		"required": []string{"agent", "text"},
	},
})

// OnMessage implements grain.Agent: one request, answered after as many
// tool rounds as the model needs.
func (a *Assistant) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if len(a.history) == 0 {
		a.history = append(a.history, openai.SystemMessage("You are a helpful assistant. Use ask_agent to ask other agents."))
	}
	a.history = append(a.history, openai.UserMessage(m.Message))
	for range maxToolRounds {
		completion, err := a.llm.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    a.model,
			Messages: a.history,
			Tools:    []openai.ChatCompletionToolUnionParam{askAgent},
		})
		if err != nil {
			return nil, errs.Wrap(codes.Unavailable, err, "the model")
		}
		if len(completion.Choices) == 0 {
			return nil, errs.New(codes.Unavailable, "the model answered no choice")
		}
		msg := completion.Choices[0].Message
		a.history = append(a.history, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			r := m.Response()
			r.Message = msg.Content
			return r, nil
		}
		for _, call := range msg.ToolCalls {
			a.history = append(a.history, openai.ToolMessage(a.runTool(ctx, call), call.ID))
		}
	}
	return nil, errs.New(codes.ResourceExhausted, "the model called tools %d times without answering", maxToolRounds)
}

// runTool runs one tool call and returns what the model gets back: the
// result, or the error as text, so that the model can react to it.
func (a *Assistant) runTool(ctx context.Context, call openai.ChatCompletionMessageToolCallUnion) string {
	if call.Function.Name != "ask_agent" {
		return "error: no tool " + call.Function.Name
	}
	var args struct{ Agent, Text string }
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
		return "error: arguments: " + err.Error()
	}
	r, err := a.host.Ask(ctx, args.Agent, grain.Text(args.Text))
	if err != nil {
		return "error: " + err.Error()
	}
	return r.Message
}

// Weather is a plain agent that a tool reaches: Weather:<city> answers
// with that city's weather (made up).
type Weather struct{ city string }

// OnMessage implements grain.Agent.
func (w Weather) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = fmt.Sprintf("%s: sunny, 24°C", w.city)
	return r, nil
}

func main() {
	var opts []option.RequestOption
	if url := os.Getenv("OPENAI_BASE_URL"); url != "" {
		opts = append(opts, option.WithBaseURL(url))
	}
	if key := os.Getenv("OPENAI_API_KEY"); key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	llm := openai.NewClient(opts...)
	model := os.Getenv("OPENAI_MODEL")
	if model == "" {
		model = openai.ChatModelGPT5_4Mini
	}

	reg := grain.NewRegistry()
	if err := reg.Register("Assistant", func(h grain.Host) (grain.Agent, error) {
		return &Assistant{host: h, llm: llm, model: model}, nil
	}, grain.TypeInfo{Description: "Answers with a language model that may ask other agents."}); err != nil {
		log.Fatal(err)
	}
	if err := reg.Register("Weather", func(h grain.Host) (grain.Agent, error) {
		return Weather{city: strings.ToUpper(h.Address().Alias[:1]) + h.Address().Alias[1:]}, nil
	}, grain.TypeInfo{Description: "Knows the weather of the city it is named after."}); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
