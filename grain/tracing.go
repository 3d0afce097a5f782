package grain

import (
	"context"

	"github.com/agentsilo/agentsilo/internal/siloapi"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Spans. A silo wires a siloapi.Tracer into its runtime; the runtime asks it
// for spans only around messages that are part of a trace (a traceparent
// in the message, or in the message of the turn that sends it), so that
// untraced messages cost a string check:
//
//   - the turn of an agent that handles a traced message runs inside a
//     server span (Tracer.Turn), which its handler's context carries: its
//     logs and the messages it sends belong to it;
//   - a REQUEST, ONE_WAY message or EVENT an agent sends from a traced turn
//     gets a client span (Tracer.Call), whose traceparent the message
//     carries to its receiver, on this silo or another.

// callTraced reports whether a message msg sent from turn t (nil: not sent
// from a turn) gets a client span, and with which parent traceparent
// beside ctx's span: the turn's.
func (rt *Runtime) callTraced(t *turn, msg *Message) bool {
	return t != nil && rt.silo.Tracer != nil && (msg.traceparent != "" || t.msg.traceparent != "")
}

// askTraced is ask for a request that gets a client span (callTraced).
func (rt *Runtime) askTraced(ctx context.Context, t *turn, owner string, msg *Message) (*Message, error) {
	ctx, tp, end := rt.silo.Tracer.Call(ctx, spanInfo(msg), t.msg.traceparent)
	msg.traceparent = tp
	reply, err := rt.askFrom(ctx, t, owner, msg, 0)
	end(err)
	return reply, err
}

// tellTraced is tell for a one-way message or event that gets a client
// span (callTraced).
func (rt *Runtime) tellTraced(ctx context.Context, t *turn, owner string, msg *Message) error {
	ctx, tp, end := rt.silo.Tracer.Call(ctx, spanInfo(msg), t.msg.traceparent)
	msg.traceparent = tp
	err := rt.tellFrom(ctx, t, owner, msg, 0)
	end(err)
	return err
}

// traceTurn starts the server span of turn ctx (a *turn) handling msg, if
// msg is part of a trace and the silo traces: the turn's context then
// carries the span. It returns the function that ends the span with the
// handler's outcome, or nil.
func (a *activation) traceTurn(ctx context.Context, msg *Message) func(error) {
	tr := a.rt.silo.Tracer
	if tr == nil || msg.traceparent == "" {
		return nil
	}
	t, ok := ctx.(*turn)
	if !ok {
		return nil
	}
	var end func(error)
	t.Context, end = tr.Turn(t.Context, a.key, spanInfo(msg))
	return end
}

// traceparent is the traceparent a message sent from turn t with ctx
// carries when it sets none: that of ctx's span (the turn's server span,
// or a span of the agent's own), else that of the turn's message.
func (rt *Runtime) traceparent(ctx context.Context, t *turn) string {
	if tr := rt.silo.Tracer; tr != nil && t.msg.traceparent != "" {
		if tp := tr.Traceparent(ctx); tp != "" {
			return tp
		}
	}
	return t.msg.traceparent
}

// spanInfo is what msg's span says of it.
func spanInfo(msg *Message) siloapi.SpanInfo {
	return siloapi.SpanInfo{Kind: agentsilov1.Kind(msg.Kind), From: msg.From, To: msg.To, MessageType: msg.MessageType, Traceparent: msg.traceparent}
}

// WithTraceparent returns a copy of ctx whose messages, sent with it from
// outside an agent's turn (by the runtime's Ask and Send, or a client's),
// carry the W3C trace context tp, unless ctx has an OpenTelemetry span:
// their receivers' turns continue that trace. Messages an agent sends from
// its turn carry the turn's trace (see Traceparent).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, traceparentKey{}, tp)
}

// traceparentKey is the context key of WithTraceparent.
type traceparentKey struct{}

// outsideTraceparent is the trace context of a message sent with ctx from
// outside a turn: that of ctx's span if the silo traces, else
// WithTraceparent's.
func (rt *Runtime) outsideTraceparent(ctx context.Context) string {
	if tr := rt.silo.Tracer; tr != nil {
		if tp := tr.Traceparent(ctx); tp != "" {
			return tp
		}
	}
	tp, _ := ctx.Value(traceparentKey{}).(string)
	return tp
}

// Traceparent returns the W3C trace context m carries, "" if none: the
// trace its sender's call belongs to. A handler has it in its context
// (the package's Traceparent); this is for code that keeps messages.
func (m *Message) Traceparent() string { return m.traceparent }
