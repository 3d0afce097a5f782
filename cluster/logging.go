package cluster

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/grain"
)

// TraceLogHandler wraps h so that every record logged with a context that
// belongs to a trace carries its ids: trace_id and span_id (hex, as W3C
// Trace Context writes them). The trace is the OpenTelemetry span in the
// context, or else the traceparent of the message an agent is handling
// (grain.Traceparent), so that an agent logging with its handler's context
// (`h.Logger().InfoContext(ctx, ...)`) is tied to the call that caused it.
// A silo wraps its loggers' handlers with it (SiloConfig.Logger, and
// the runtime's and gateway's own if set).
func TraceLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*traceLogHandler); ok {
		return h
	}
	return &traceLogHandler{h: h, top: h}
}

// traceLogger returns l with its handler wrapped by TraceLogHandler (l
// itself if it is already): the runtime's and the gateway's loggers, when
// a program sets its own, carry trace ids like the silo's.
func traceLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(*traceLogHandler); ok {
		return l
	}
	return slog.New(TraceLogHandler(l.Handler()))
}

// traceLogHandler puts the ids at the top level of a record, outside any
// group the logger opened: top is the wrapped handler before the first
// WithGroup, and ops redo what came after it, for a record in a trace.
type traceLogHandler struct {
	h   slog.Handler // the wrapped handler, every WithAttrs and WithGroup applied
	top slog.Handler
	ops []func(slog.Handler) slog.Handler
}

// Enabled implements slog.Handler.
func (h *traceLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.h.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *traceLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.h.Handle(ctx, r)
	}
	tid, sid, ok := traceIDs(ctx)
	if !ok {
		return h.h.Handle(ctx, r)
	}
	ids := []slog.Attr{slog.String("trace_id", tid), slog.String("span_id", sid)}
	if len(h.ops) == 0 {
		r = r.Clone()
		r.AddAttrs(ids...)
		return h.h.Handle(ctx, r)
	}
	hh := h.top.WithAttrs(ids)
	for _, op := range h.ops {
		hh = op(hh)
	}
	return hh.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *traceLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(h.ops) == 0 {
		inner := h.h.WithAttrs(as)
		return &traceLogHandler{h: inner, top: inner}
	}
	return h.with(func(x slog.Handler) slog.Handler { return x.WithAttrs(as) })
}

// WithGroup implements slog.Handler.
func (h *traceLogHandler) WithGroup(name string) slog.Handler {
	return h.with(func(x slog.Handler) slog.Handler { return x.WithGroup(name) })
}

func (h *traceLogHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	return &traceLogHandler{h: op(h.h), top: h.top, ops: append(h.ops[:len(h.ops):len(h.ops)], op)}
}

// traceIDs returns the trace and span ids of ctx's span, or of the
// traceparent of the turn ctx belongs to.
func traceIDs(ctx context.Context) (traceID, spanID string, ok bool) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String(), sc.SpanID().String(), true
	}
	return parseTraceparent(grain.Traceparent(ctx))
}

// parseTraceparent returns the trace and span ids of a W3C traceparent,
// "00-<32 hex>-<16 hex>-<2 hex>".
func parseTraceparent(tp string) (traceID, spanID string, ok bool) {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return "", "", false
	}
	tid, err := trace.TraceIDFromHex(tp[3:35])
	if err != nil {
		return "", "", false
	}
	sid, err := trace.SpanIDFromHex(tp[36:52])
	if err != nil {
		return "", "", false
	}
	return tid.String(), sid.String(), true
}
