package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// TestLLMMetrics: a declared model type's turn is counted in its silo's
// registry: its model calls by type, provider, model and code, their
// tokens by direction and their latency; its tool call by tool and code.
// A tool the model makes up is answered, and counted nowhere.
func TestLLMMetrics(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{
			{ID: "c1", Name: "memory_put", Arguments: `{"key": "order", "text": "order 7 left on Monday"}`},
			{ID: "c2", Name: "launch_rockets", Arguments: `{}`},
		}, InputTokens: 30, OutputTokens: 7},
		fakemodel.Step{Text: "Noted.", InputTokens: 50, OutputTokens: 2},
	)
	defer srv.Close()
	s := declaredSilo(t, e, "/llmmetrics/", "s0", grain.NewRegistry(), "--llm-allow-private-networks")
	defer closeSilo(t, s)
	admin := dialSilo(t, s, "system")
	defer admin.Close()
	def := fmt.Sprintf("type: Helper\nmodel: {provider: openai, base_url: %s, name: fake-1}\ntools: [{memory: true}]\n", srv.OpenAIURL())
	if _, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil {
		t.Fatal(err)
	}
	alice := dialSilo(t, s, "alice")
	defer alice.Close()
	if r, err := alice.Ask(t.Context(), "Helper:a", &client.Message{Message: "remember order 7"}); err != nil || r.Message != "Noted." {
		t.Fatalf("ask: %v, %v", r, err)
	}

	want := `
# HELP agentsilo_llm_calls_total Model calls made by model agents on this silo, by agent type, provider, model and gRPC code.
# TYPE agentsilo_llm_calls_total counter
agentsilo_llm_calls_total{code="OK",model="fake-1",provider="openai",type="Helper"} 2
# HELP agentsilo_llm_tokens_total Tokens of the model calls of model agents on this silo, as the model reported them, by agent type, model and direction (input, output).
# TYPE agentsilo_llm_tokens_total counter
agentsilo_llm_tokens_total{direction="input",model="fake-1",type="Helper"} 80
agentsilo_llm_tokens_total{direction="output",model="fake-1",type="Helper"} 9
# HELP agentsilo_llm_tool_calls_total Tool calls run by model agents on this silo, by agent type, tool and gRPC code.
# TYPE agentsilo_llm_tool_calls_total counter
agentsilo_llm_tool_calls_total{code="OK",tool="memory_put",type="Helper"} 1
`
	reg := s.Metrics()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "agentsilo_llm_calls_total", "agentsilo_llm_tokens_total", "agentsilo_llm_tool_calls_total"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{"agentsilo_llm_call_duration_seconds": 1, "agentsilo_llm_tool_call_duration_seconds": 1} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != n {
			t.Errorf("%s: %d series (%v), want %d", name, got, err, n)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "launch_rockets") {
					t.Errorf("%s has a series for the made-up tool: %v", mf.GetName(), m)
				}
			}
		}
	}
}
