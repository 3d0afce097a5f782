package client

import (
	"cmp"
	"context"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: each Ask, Send and Event runs in a client span (named "agentsilo
// Ask", "agentsilo Send", "agentsilo Event") made by the client's
// TracerProvider (WithTracerProvider; default otel.GetTracerProvider()), a
// child of the span in the caller's context. The message carries the span's
// W3C traceparent (AgentMessage.traceparent) to the gateway, which continues
// the trace through the cluster. A message whose Traceparent the caller set
// keeps it. Without an OpenTelemetry SDK installed, no span is recorded,
// and the message carries the caller's own trace context, if any.

const instrumentationName = "github.com/agentsilo/agentsilo/client"

// WithTracerProvider makes the client's spans with tp. Default:
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracerProvider = tp })
}

func (c *Client) tracer() trace.Tracer {
	tp := c.opts.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(instrumentationName)
}

// startSpan starts the client span of m and puts its traceparent in m.
func (c *Client) startSpan(ctx context.Context, name string, m *agentsilov1.AgentMessage) (context.Context, trace.Span) {
	ctx, span := c.tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("agentsilo.to", m.GetTo()), attribute.String("agentsilo.message_type", m.GetMessageType()))
	}
	if m.Traceparent == "" {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		m.Traceparent = cmp.Or(carrier["traceparent"], grain.Traceparent(ctx))
	}
	return ctx, span
}

// endSpan ends span, recording err, if any.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}
