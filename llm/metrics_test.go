package llm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The steps a metered tracer observes are counted in the type's series:
// model calls by provider, model and code, with their tokens and
// latency; tool calls by tool and code, with their latency. Past
// MaxToolSeries tools of a type, the others share one series; an
// unmetered tracer counts nothing.
func TestMetrics(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	tr := newTracer(nil).metered(m, "Helper")
	now := time.Unix(1000, 0)
	tr.m.now = func() time.Time { return now }

	_, step := tr.chat(t.Context(), ProviderOpenAI, "fake-1")
	now = now.Add(1500 * time.Millisecond)
	step.end(&Response{Model: "fake-1-2026", Usage: Usage{InputTokens: 20, OutputTokens: 8}}, nil)
	_, step = tr.chat(t.Context(), ProviderOpenAI, "fake-1")
	step.end(nil, errs.New(codes.Unavailable, "the model is down"))

	_, ts := tr.tool(t.Context(), "Counter_add", "c1")
	now = now.Add(20 * time.Millisecond)
	ts.end(nil)
	_, ts = tr.tool(t.Context(), "Counter_add", "c2")
	ts.end(errs.New(codes.NotFound, "no such counter"))

	newTracer(nil).metered(nil, "Unmetered").chat(context.Background(), ProviderOpenAI, "fake-1")

	want := `
# HELP agentsilo_llm_calls_total Model calls made by model agents on this silo, by agent type, provider, model and gRPC code.
# TYPE agentsilo_llm_calls_total counter
agentsilo_llm_calls_total{code="OK",model="fake-1",provider="openai",type="Helper"} 1
agentsilo_llm_calls_total{code="Unavailable",model="fake-1",provider="openai",type="Helper"} 1
# HELP agentsilo_llm_tokens_total Tokens of the model calls of model agents on this silo, as the model reported them, by agent type, model and direction (input, output).
# TYPE agentsilo_llm_tokens_total counter
agentsilo_llm_tokens_total{direction="input",model="fake-1",type="Helper"} 20
agentsilo_llm_tokens_total{direction="output",model="fake-1",type="Helper"} 8
# HELP agentsilo_llm_tool_calls_total Tool calls run by model agents on this silo, by agent type, tool and gRPC code.
# TYPE agentsilo_llm_tool_calls_total counter
agentsilo_llm_tool_calls_total{code="NotFound",tool="Counter_add",type="Helper"} 1
agentsilo_llm_tool_calls_total{code="OK",tool="Counter_add",type="Helper"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "agentsilo_llm_calls_total", "agentsilo_llm_tokens_total", "agentsilo_llm_tool_calls_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.callDuration); n != 1 {
		t.Errorf("%d model latency series, want 1", n)
	}
	if got := histogramSum(t, reg, "agentsilo_llm_call_duration_seconds"); got != 1.5 {
		t.Errorf("model latency sum %v, want 1.5", got)
	}
	if got := histogramSum(t, reg, "agentsilo_llm_tool_call_duration_seconds"); got < 0.0199 || got > 0.0201 {
		t.Errorf("tool latency sum %v, want 0.02", got)
	}

	for i := range MaxToolSeries + 10 {
		_, ts := tr.tool(t.Context(), fmt.Sprintf("tool_%d", i), "c")
		ts.end(nil)
	}
	if n := testutil.CollectAndCount(m.toolDuration); n != MaxToolSeries+1 {
		t.Errorf("%d tool latency series, want %d (the cap and one for the others)", n, MaxToolSeries+1)
	}
	if v := testutil.ToFloat64(m.tools.WithLabelValues("Helper", otherTool, "OK")); v != 11 {
		t.Errorf("%s calls %v, want 11", otherTool, v)
	}
}

// histogramSum is the sum of the one series of a histogram.
func histogramSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
