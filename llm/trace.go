package llm

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/errs"
)

// Spans, after OpenTelemetry's semantic conventions for generative AI:
//
//	chat <model>          client span per model call: gen_ai.operation.name
//	                      "chat", gen_ai.provider.name, gen_ai.request.model,
//	                      gen_ai.response.model, gen_ai.usage.input_tokens,
//	                      gen_ai.usage.output_tokens,
//	                      gen_ai.response.finish_reasons
//	execute_tool <tool>   internal span per tool call: gen_ai.operation.name
//	                      "execute_tool", gen_ai.tool.name,
//	                      gen_ai.tool.call.id
//
// both children of the turn's span (the silo's "turn Ask" when the request
// is traced), and a tool's Ask to another agent a child of its span. The
// same steps are counted in the type's Metrics, if it has any (metered).

const instrumentationName = "github.com/agentsilo/agentsilo/llm"

type tracer struct {
	t trace.Tracer
	m *typeMetrics // nil: no metrics
}

func newTracer(tp trace.TracerProvider) tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tracer{t: tp.Tracer(instrumentationName)}
}

// metered returns t counting the steps it observes in m (nil: nowhere),
// as agent type typ's.
func (t tracer) metered(m *Metrics, typ string) tracer {
	t.m = m.forType(typ)
	return t
}

// chatStep is a model call being observed.
type chatStep struct {
	span            trace.Span
	m               *typeMetrics
	provider, model string
	start           time.Time
}

// toolStep is a tool call being observed.
type toolStep struct {
	span  trace.Span
	m     *typeMetrics
	name  string
	start time.Time
}

func (t tracer) chat(ctx context.Context, provider, model string) (context.Context, chatStep) {
	ctx, span := t.t.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", provider),
		attribute.String("gen_ai.request.model", model),
	))
	step := chatStep{span: span, m: t.m, provider: provider, model: model}
	if t.m != nil {
		step.start = t.m.now()
	}
	return ctx, step
}

func (s chatStep) end(r *Response, err error) {
	span := s.span
	if r != nil && span.IsRecording() {
		span.SetAttributes(
			attribute.String("gen_ai.response.model", r.Model),
			attribute.Int64("gen_ai.usage.input_tokens", r.Usage.InputTokens),
			attribute.Int64("gen_ai.usage.output_tokens", r.Usage.OutputTokens),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{r.APIStopReason}),
		)
	}
	endSpan(span, err)
	s.m.model(s.provider, s.model, s.start, r, err)
}

func (t tracer) tool(ctx context.Context, name, callID string) (context.Context, toolStep) {
	ctx, span := t.t.Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", callID),
	))
	step := toolStep{span: span, m: t.m, name: name}
	if t.m != nil {
		step.start = t.m.now()
	}
	return ctx, step
}

func (s toolStep) end(err error) {
	endSpan(s.span, err)
	s.m.tool(s.name, s.start, err)
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("error.type", errs.Code(err).String()))
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}
