package a2a

import (
	"context"
	"net/http"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// What the A2A agent type reports: Prometheus counters (registered in
// RemoteOptions.Metrics) and OpenTelemetry spans (of
// RemoteOptions.TracerProvider), and every request it sends out carries
// the W3C trace context of the turn that sends it (traceparent header).
//
//	agentsilo_a2a_remote_polls_total          GetTask polls of followed tasks
//	agentsilo_a2a_remote_resubscribes_total   streams of followed tasks that ended early
//	agentsilo_a2a_remote_questions_total      input-required rounds
//	agentsilo_a2a_remote_loop_breaks_total    tasks ended by loop protection, by limit
//	agentsilo_a2a_remote_background_total     background follows, by outcome
//
// Spans: "a2a remote" around an Ask, "a2a follow" around following a
// task, "a2a question" around a question asked of the caller; they carry
// a2a.task_id, a2a.context_id and agentsilo.correlation_id.

type remoteMetrics struct {
	polls, resubscribes, questions prometheus.Counter
	loopBreaks                     *prometheus.CounterVec
	background                     *prometheus.CounterVec
}

func newRemoteMetrics(reg prometheus.Registerer) *remoteMetrics {
	m := &remoteMetrics{
		polls:        prometheus.NewCounter(prometheus.CounterOpts{Name: "agentsilo_a2a_remote_polls_total", Help: "GetTask polls of remote A2A tasks being followed."}),
		resubscribes: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentsilo_a2a_remote_resubscribes_total", Help: "Streams of followed remote A2A tasks that ended before the task settled (then polled)."}),
		questions:    prometheus.NewCounter(prometheus.CounterOpts{Name: "agentsilo_a2a_remote_questions_total", Help: "input-required rounds of remote A2A tasks."}),
		loopBreaks:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentsilo_a2a_remote_loop_breaks_total", Help: "Remote A2A tasks ended by loop protection, by the limit hit (rounds, repeats)."}, []string{"limit"}),
		background:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentsilo_a2a_remote_background_total", Help: "Background follows of remote A2A tasks, by outcome (started, delivered, resumed)."}, []string{"outcome"}),
	}
	if reg != nil {
		m.polls = register(reg, m.polls)
		m.resubscribes = register(reg, m.resubscribes)
		m.questions = register(reg, m.questions)
		m.loopBreaks = register(reg, m.loopBreaks)
		m.background = register(reg, m.background)
	}
	return m
}

// register registers c in reg, or returns the collector registered
// already under its name (the type registered twice in one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

// remoteTracer starts the A2A agent type's spans.
type remoteTracer struct{ t trace.Tracer }

func newRemoteTracer(tp trace.TracerProvider) remoteTracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return remoteTracer{t: tp.Tracer("github.com/agentsilo/agentsilo/a2a")}
}

// Start starts a span named name for the task.
func (t remoteTracer) Start(ctx context.Context, name string, task spec.TaskID, contextID string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("a2a.task_id", string(task)), attribute.String("a2a.context_id", contextID))
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// traceTransport puts the W3C trace context of a request's context (the
// turn's span) in its headers.
type traceTransport struct{ base http.RoundTripper }

func (t traceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		r = r.Clone(r.Context())
		propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.base.RoundTrip(r)
}
