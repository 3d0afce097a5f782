package llmtest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// Weather is the agent type the model agent's tool asks: ask_Weather.
type Weather struct{}

func (Weather) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = "sunny, 24°C"
	return r, nil
}

// A model agent, Assistant, against a scripted model: its first response
// is a call of the tool ask_Weather, which the agent runs (an Ask to
// Weather:rome); then a 429, which the SDK retries at once; then the
// answer. The script is taken step by step, and the server recorded what
// the model was sent: the tool's result, in the last request. (In a test,
// grain/graintest runs the agent, and stubs Weather.)
func Example() {
	model := llmtest.New(
		llmtest.Step{ToolCalls: []llmtest.ToolCall{{Name: "ask_Weather", Arguments: `{"agent": "rome", "text": "tomorrow?"}`}}},
		llmtest.Step{Status: 429, RetryAfter: "0"},
		llmtest.Step{Text: "Sunny tomorrow in Rome, 24°C."},
	)
	defer model.Close()

	reg := grain.NewRegistry()
	if err := reg.Register("Weather", func(grain.Host) (grain.Agent, error) { return Weather{}, nil }); err != nil {
		log.Fatal(err)
	}
	err := llm.Register(reg, llm.Definition{
		Type:         "Assistant",
		Model:        llm.Model{Provider: llm.ProviderOpenAI, BaseURL: model.OpenAIURL(), Name: "test-model"},
		SystemPrompt: "You answer questions about the weather.",
		Tools:        []llm.ToolRef{{Agent: "Weather"}},
	}, llm.WithResumeReminder(-1, 0)) // this runtime has no reminders
	if err != nil {
		log.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = grain.NewMemoryStateStore() // where the agent records its turns
	rt, err := grain.New(cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())

	r, err := rt.Ask(context.Background(), &grain.Message{To: "Assistant:alice:a", Message: "Will it rain in Rome tomorrow?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Message)
	for _, req := range model.Requests() {
		last := req.LastMessage()
		fmt.Printf("request %d, step %d: %s %q\n", req.N, req.Step, last.Role, last.Data)
	}
	fmt.Println("steps left:", model.Left())
	// Output:
	// Sunny tomorrow in Rome, 24°C.
	// request 1, step 0: user "Will it rain in Rome tomorrow?"
	// request 2, step 1: tool "sunny, 24°C"
	// request 3, step 2: tool "sunny, 24°C"
	// steps left: 0
}
