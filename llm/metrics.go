package llm

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentsilo/agentsilo/errs"
)

// Metrics are the Prometheus metrics of model agents: their model calls,
// tokens and tool calls. One Metrics serves every model agent type of a
// silo (WithMetrics); it is a prometheus.Collector, registered once in the
// silo's registry, so that a type registered again (a declared type
// replaced) goes on counting in the same series.
//
//	agentsilo_llm_calls_total{type,provider,model,code}
//	agentsilo_llm_call_duration_seconds{type,provider,model}
//	agentsilo_llm_tokens_total{type,model,direction}      direction: input, output
//	agentsilo_llm_tool_calls_total{type,tool,code}
//	agentsilo_llm_tool_call_duration_seconds{type,tool}
//
// Label values are bounded: the type and the model are the definition's
// (the model asked for, not the name the API answers with), the code one
// of the gRPC codes, and a tool one the definition gives the model (a
// name the model makes up is answered without running anything, and is
// not observed); past MaxToolSeries tools of one type, the others are
// counted as "(other)". Its methods are safe for concurrent use.
type Metrics struct {
	calls        *prometheus.CounterVec
	callDuration *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	tools        *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec

	mu        sync.Mutex
	toolNames map[string]map[string]bool // by type: the tool label values used
}

// MaxToolSeries bounds the tool label values of one agent type.
const MaxToolSeries = 128

// otherTool labels the tools of a type past MaxToolSeries.
const otherTool = "(other)"

// Buckets of the model call latency: from a cached answer to a long
// reasoning call.
var modelBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

// Buckets of the tool call latency: from a local agent's turn to a slow
// outside server.
var toolBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewMetrics makes the metrics of model agents; register them in a
// registry (prometheus.Registerer.Register) and give them to the types
// with WithMetrics.
func NewMetrics() *Metrics {
	return &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_llm_calls_total",
			Help: "Model calls made by model agents on this silo, by agent type, provider, model and gRPC code.",
		}, []string{"type", "provider", "model", "code"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentsilo_llm_call_duration_seconds",
			Help:    "Time the model calls of model agents on this silo took (the SDK's retries included), by agent type, provider and model.",
			Buckets: modelBuckets,
		}, []string{"type", "provider", "model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_llm_tokens_total",
			Help: "Tokens of the model calls of model agents on this silo, as the model reported them, by agent type, model and direction (input, output).",
		}, []string{"type", "model", "direction"}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_llm_tool_calls_total",
			Help: "Tool calls run by model agents on this silo, by agent type, tool and gRPC code.",
		}, []string{"type", "tool", "code"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentsilo_llm_tool_call_duration_seconds",
			Help:    "Time the tool calls of model agents on this silo took, by agent type and tool.",
			Buckets: toolBuckets,
		}, []string{"type", "tool"}),
		toolNames: make(map[string]map[string]bool),
	}
}

var _ prometheus.Collector = (*Metrics)(nil)

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.callDuration, m.tokens, m.tools, m.toolDuration}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// WithMetrics makes the agents count their model and tool calls in m (nil:
// not at all).
func WithMetrics(m *Metrics) Option { return optionFunc(func(o *options) { o.metrics = m }) }

// typeMetrics are the series of one agent type.
type typeMetrics struct {
	m   *Metrics
	typ string
	// now reads the time the latencies are measured with.
	now func() time.Time
}

// forType returns the series of agent type typ; nil if m is nil.
func (m *Metrics) forType(typ string) *typeMetrics {
	if m == nil {
		return nil
	}
	return &typeMetrics{m: m, typ: typ, now: time.Now}
}

// model observes a model call that started at start and ended with r (nil
// if it failed) and err.
func (t *typeMetrics) model(provider, model string, start time.Time, r *Response, err error) {
	if t == nil {
		return
	}
	t.m.calls.WithLabelValues(t.typ, provider, model, errs.Code(err).String()).Inc()
	t.m.callDuration.WithLabelValues(t.typ, provider, model).Observe(t.now().Sub(start).Seconds())
	if r != nil {
		if r.Usage.InputTokens > 0 {
			t.m.tokens.WithLabelValues(t.typ, model, "input").Add(float64(r.Usage.InputTokens))
		}
		if r.Usage.OutputTokens > 0 {
			t.m.tokens.WithLabelValues(t.typ, model, "output").Add(float64(r.Usage.OutputTokens))
		}
	}
}

// tool observes a call of the tool name that started at start and ended
// with err.
func (t *typeMetrics) tool(name string, start time.Time, err error) {
	if t == nil {
		return
	}
	name = t.m.toolLabel(t.typ, name)
	t.m.tools.WithLabelValues(t.typ, name, errs.Code(err).String()).Inc()
	t.m.toolDuration.WithLabelValues(t.typ, name).Observe(t.now().Sub(start).Seconds())
}

// toolLabel is the label value of typ's tool name: the name, or otherTool
// once the type has MaxToolSeries others.
func (m *Metrics) toolLabel(typ, name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.toolNames[typ]
	if seen[name] {
		return name
	}
	if len(seen) >= MaxToolSeries {
		return otherTool
	}
	if seen == nil {
		seen = make(map[string]bool)
		m.toolNames[typ] = seen
	}
	seen[name] = true
	return name
}
