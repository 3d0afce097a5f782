package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(TraceLogHandler(slog.NewJSONHandler(&buf, nil))).With("silo", "s1")
	line := func() map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		buf.Reset()
		return m
	}

	// Outside a trace: no ids.
	log.InfoContext(t.Context(), "plain")
	if m := line(); m["trace_id"] != nil || m["span_id"] != nil || m["silo"] != "s1" {
		t.Errorf("without a trace: %v", m)
	}
	log.Info("no context")
	if m := line(); m["trace_id"] != nil {
		t.Errorf("without a context: %v", m)
	}

	// In a span: its ids.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(t.Context(), "op")
	defer span.End()
	log.WithGroup("g").InfoContext(ctx, "traced", "k", "v")
	m := line()
	sc := span.SpanContext()
	if m["trace_id"] != sc.TraceID().String() || m["span_id"] != sc.SpanID().String() {
		t.Errorf("in a span: %v, want trace %s span %s", m, sc.TraceID(), sc.SpanID())
	}

	// A remote span context (as a message's traceparent gives) counts too.
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, Remote: true,
	})
	log.InfoContext(trace.ContextWithRemoteSpanContext(t.Context(), remote), "remote")
	if m := line(); m["trace_id"] != remote.TraceID().String() {
		t.Errorf("remote span context: %v", m)
	}

	// Wrapping twice adds the ids once.
	h := TraceLogHandler(TraceLogHandler(slog.NewTextHandler(&buf, nil)))
	slog.New(h).InfoContext(ctx, "once")
	if n := bytes.Count(buf.Bytes(), []byte("trace_id=")); n != 1 {
		t.Errorf("trace_id %d times: %s", n, buf.String())
	}
}

func TestParseTraceparent(t *testing.T) {
	tid, sid, ok := parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if !ok || tid != "4bf92f3577b34da6a3ce929d0e0e4736" || sid != "00f067aa0ba902b7" {
		t.Errorf("got %q %q %v", tid, sid, ok)
	}
	for _, bad := range []string{"", "00-4bf92f3577b34da6a3ce929d0e0e4736", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-zzf067aa0ba902b7-01"} {
		if _, _, ok := parseTraceparent(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A program that sets its own runtime or gateway logger (SiloConfig's
// Runtime.Logger, Gateway.Logger) gets trace ids in what is logged
// through it, as the silo's own logger does.
func TestOwnLoggersCarryTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	own := slog.New(slog.NewJSONHandler(&buf, nil))
	cfg := DefaultSiloConfig()
	cfg.Logger = testLogger()
	cfg.Runtime.Logger, cfg.Gateway.Logger = own, own
	sc, err := newSubConfigs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(t.Context(), "op")
	defer span.End()
	for name, l := range map[string]*slog.Logger{"runtime": sc.runtime.Logger, "gateway": sc.gateway.Logger} {
		buf.Reset()
		l.With("agent", "A:o:x").InfoContext(ctx, "traced")
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%s: %q: %v", name, buf.String(), err)
		}
		if m["trace_id"] != span.SpanContext().TraceID().String() || m["span_id"] != span.SpanContext().SpanID().String() {
			t.Errorf("the program's own %s logger wrote %v: no trace ids", name, m)
		}
	}
}
