// Package tracing starts the silo's OpenTelemetry spans around messages. A
// trace crosses the cluster inside the messages themselves: the
// W3C traceparent of the span a message belongs to travels in
// AgentMessage.traceparent, from the SDK (which injects its caller's span),
// through the gateway and the silo-to-silo transport, to every message an
// agent sends while handling it (the runtime copies the turn's traceparent
// to them). The silo starts spans where a message enters or leaves it:
//
//	gateway <Kind>   server span per client call, at the gateway
//	forward <Kind>   client span per message sent to another silo
//	peer <Kind>      server span per message received from another silo
//
// and puts the span's own traceparent in the message, so what it causes
// nests under it. Forward and peer spans are started only for messages that
// are part of a trace already. Spans are made by cluster.SiloConfig.TracerProvider
// (default: the global one, a no-op unless the program installs an SDK).
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// instrumentationName names agentsilo's Tracer.
const instrumentationName = "github.com/agentsilo/agentsilo"

// traceContext is the W3C Trace Context propagator the messages use.
var traceContext = propagation.TraceContext{}

// Tracer starts the silo's spans around messages.
type Tracer struct {
	t trace.Tracer
}

// New returns a Tracer of tp, or of the global provider if tp is nil.
func New(tp trace.TracerProvider) Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return Tracer{t: tp.Tracer(instrumentationName)}
}

// messageCarrier is the propagation carrier of a message: its traceparent
// field. tracestate is not carried.
type messageCarrier struct{ m *agentsilov1.AgentMessage }

func (c messageCarrier) Get(key string) string {
	if key == "traceparent" {
		return c.m.GetTraceparent()
	}
	return ""
}

func (c messageCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.m.Traceparent = value
	}
}

func (c messageCarrier) Keys() []string { return []string{"traceparent"} }

// KindName is the short name of a message kind in span names.
func KindName(k agentsilov1.Kind) string {
	switch k {
	case agentsilov1.Kind_KIND_REQUEST:
		return "Ask"
	case agentsilov1.Kind_KIND_ONE_WAY:
		return "Send"
	case agentsilov1.Kind_KIND_EVENT:
		return "Event"
	}
	return "Message"
}

// Start starts a span named name around m, as a child of the trace m
// carries (else of ctx's span), and makes m carry the new span. It returns
// ctx with the span.
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, m *agentsilov1.AgentMessage, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if m.GetTraceparent() != "" {
		ctx = traceContext.Extract(ctx, messageCarrier{m})
	}
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(kind))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("agentsilo.to", m.GetTo()),
			attribute.String("agentsilo.kind", m.GetKind().String()),
			attribute.String("agentsilo.message_type", m.GetMessageType()),
		)
		span.SetAttributes(attrs...)
	}
	// A span that records is the new parent; one that does not (no SDK)
	// carries the same context the message had, or none.
	if sc := span.SpanContext(); sc.IsValid() && (span.IsRecording() || m.GetTraceparent() == "") {
		traceContext.Inject(ctx, messageCarrier{m})
	}
	return ctx, span
}

// End ends span, recording err, if any, and its gRPC code.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("rpc.grpc.status_code", errs.Code(err).String()))
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}
