// Command llm is a silo program with a model agent: Assistant, declared
// by an llm.Definition, answers each request with a language model that
// may call a tool, the agent type Weather, whose agents (Weather:<city>)
// know a city's weather. The llm package runs the loop (model, tools,
// model, ... answer), records every step in the agent's durable state,
// and resumes a turn a crash interrupted.
//
// The model is configured by the environment: OPENAI_BASE_URL (any
// OpenAI-compatible server: OpenAI's, a local llama.cpp or vLLM server, a
// gateway), OPENAI_API_KEY and OPENAI_MODEL (default gpt-5.4-mini).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
)

// Weather is a plain agent that the model reaches as a tool: Weather:<city>
// answers with that city's weather (made up).
type Weather struct{ city string }

// OnMessage implements grain.Agent.
func (w Weather) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = fmt.Sprintf("%s: sunny, 24°C", w.city)
	return r, nil
}

func main() {
	reg := grain.NewRegistry()
	err := llm.Register(reg, llm.Definition{
		Type:        "Assistant",
		Description: "Answers with a language model that may ask other agents.",
		Model: llm.Model{
			Provider:  llm.ProviderOpenAI,
			BaseURL:   os.Getenv("OPENAI_BASE_URL"),
			Name:      cmp.Or(os.Getenv("OPENAI_MODEL"), "gpt-5.4-mini"),
			APIKeyEnv: "OPENAI_API_KEY",
		},
		SystemPrompt: "You are a helpful assistant. Ask a Weather agent, named after its city in lower case, about the weather.",
		Tools:        []llm.ToolRef{{Agent: "Weather"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Register("Weather", func(h grain.Host) (grain.Agent, error) {
		return Weather{city: strings.ToUpper(h.Address().Alias[:1]) + h.Address().Alias[1:]}, nil
	}, grain.TypeInfo{Description: "Knows the weather of the city it is named after."}); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
