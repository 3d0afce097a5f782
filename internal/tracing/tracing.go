// Package tracing starts the silo's OpenTelemetry spans around messages. A
// trace crosses the cluster inside the messages themselves: the
// W3C traceparent of the span a message belongs to travels in
// AgentMessage.traceparent, from the SDK (which injects its caller's span),
// through the gateway and the silo-to-silo transport, to every message an
// agent sends while handling it (the runtime copies the turn's traceparent
// to them). The silo starts spans where a message enters or leaves it:
//
//	gateway <Kind>   server span per client call, at the gateway
//	turn <Kind>      server span per agent's turn handling a message
//	call <Kind>      client span per message an agent sends from a turn
//	forward <Kind>   client span per message sent to another silo
//	peer <Kind>      server span per message received from another silo
//
// and puts the span's own traceparent in the message, so what it causes
// nests under it (a turn's span is in its handler's context instead, and
// the messages the handler sends are its children). Turn, call, forward and
// peer spans are started only for messages that are part of a trace
// already: with no trace, they cost nothing. An agent's Ask to another
// silo is thus call, forward, peer and the callee's turn, each the child of
// the one before; to an agent on the same silo, call and turn. Spans are made by cluster.SiloConfig.TracerProvider
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
	"github.com/agentsilo/agentsilo/internal/siloapi"
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

// spanName is "<prefix> <kind>" for call and turn spans, without an
// allocation.
func spanName(prefix string, k agentsilov1.Kind) string {
	call := prefix == "call"
	switch k {
	case agentsilov1.Kind_KIND_REQUEST:
		if call {
			return "call Ask"
		}
		return "turn Ask"
	case agentsilov1.Kind_KIND_ONE_WAY:
		if call {
			return "call Send"
		}
		return "turn Send"
	case agentsilov1.Kind_KIND_EVENT:
		if call {
			return "call Event"
		}
		return "turn Event"
	}
	return prefix + " " + KindName(k)
}

// Call starts the client span of m, a message an agent sends from a turn
// (siloapi.Tracer): the child of m's own traceparent if it has one, else of
// ctx's span (the turn's, or one of the agent's own), else of parent (the
// traceparent of the turn's message). m carries the span once it starts.
func (t Tracer) Call(ctx context.Context, m siloapi.SpanInfo, parent string) (context.Context, string, func(error)) {
	pctx := ctx
	switch {
	case m.Traceparent != "":
		pctx = traceContext.Extract(ctx, stringCarrier(m.Traceparent))
	case trace.SpanContextFromContext(ctx).IsValid():
	case parent != "":
		pctx = traceContext.Extract(ctx, stringCarrier(parent))
	}
	ctx, span := t.t.Start(pctx, spanName("call", m.Kind), trace.WithSpanKind(trace.SpanKindClient))
	tp := outCarrier{tp: m.Traceparent}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("agentsilo.from", m.From),
			attribute.String("agentsilo.to", m.To),
			attribute.String("agentsilo.kind", m.Kind.String()),
			attribute.String("agentsilo.message_type", m.MessageType),
		)
		traceContext.Inject(ctx, &tp)
	} else if m.Traceparent == "" {
		// No SDK: the message carries the trace it was sent in.
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() {
			traceContext.Inject(pctx, &tp)
		} else {
			tp.tp = parent
		}
	}
	return ctx, tp.tp, func(err error) { End(span, err) }
}

// Turn starts the server span of agent's turn handling m
// (siloapi.Tracer), the child of m's traceparent; the returned context
// carries it. m is not changed.
func (t Tracer) Turn(ctx context.Context, agent string, m siloapi.SpanInfo) (context.Context, func(error)) {
	ctx = traceContext.Extract(ctx, stringCarrier(m.Traceparent))
	ctx, span := t.t.Start(ctx, spanName("turn", m.Kind), trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("agentsilo.agent", agent),
			attribute.String("agentsilo.from", m.From),
			attribute.String("agentsilo.kind", m.Kind.String()),
			attribute.String("agentsilo.message_type", m.MessageType),
		)
	}
	return ctx, func(err error) { End(span, err) }
}

// Traceparent returns the W3C traceparent of ctx's span, "" if it has
// none (siloapi.Tracer).
func (t Tracer) Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c outCarrier
	traceContext.Inject(ctx, &c)
	return c.tp
}

// stringCarrier is a propagation carrier that holds a traceparent.
type stringCarrier string

func (c stringCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}

func (c stringCarrier) Set(string, string) {}

func (c stringCarrier) Keys() []string { return []string{"traceparent"} }

// outCarrier is a propagation carrier that takes a traceparent.
type outCarrier struct{ tp string }

func (c *outCarrier) Get(key string) string {
	if key == "traceparent" {
		return c.tp
	}
	return ""
}

func (c *outCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.tp = value
	}
}

func (c *outCarrier) Keys() []string { return []string{"traceparent"} }
