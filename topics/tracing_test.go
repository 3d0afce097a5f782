package topics

import (
	"context"
	"strings"
	"testing"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// traceparentOf returns the W3C traceparent of ctx's span.
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// spanIDOf returns the span id a traceparent names, "" if none.
func spanIDOf(tp string) string {
	if f := strings.Split(tp, "-"); len(f) == 4 {
		return f[2]
	}
	return ""
}

// A traced publish through the Service on etcd makes a producer span, the
// child of the publisher's; each attempt to deliver it a consumer span,
// the child of the publish span, whose traceparent the delivered message
// carries; a failed attempt's span says so. An untraced publish makes none
// and its delivery carries no traceparent.
func TestPublishAndDeliverySpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	h := newHarness(t, topicstore.NewEtcdStore(etcdtest.Start(t).Client(t), "/trace/", nil))
	h.a.handle = func(m *grain.Message) error {
		if m.Message == "traced" && m.Attempt == 1 {
			return grain.Retry(time.Millisecond, "busy")
		}
		return nil
	}
	s := h.service(func(c *Config) {
		c.TracerProvider, c.clk = tp, clock.Real{}
		c.RetryMin, c.RetryMax = time.Millisecond, 10*time.Millisecond
	})
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)

	ctx, root := tp.Tracer("test").Start(t.Context(), "root")
	if _, err := s.Publish(grain.WithTraceparent(ctx, traceparentOf(ctx)), "P:acme:p", "orders.new", &grain.Message{Message: "traced"}); err != nil {
		t.Fatal(err)
	}
	root.End()
	h.publish(s, "P:acme:p", "orders.new", "untraced")
	h.a.wait(t, "two attempts and the untraced message", func(got []*grain.Message) bool { return len(got) >= 3 })
	waitStats(t, s, "both acknowledged", func(st Stats) bool { return st.Acked == 2 })
	got := h.a.wait(t, "the deliveries", func([]*grain.Message) bool { return true })
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3 (two attempts, one untraced)", len(got))
	}

	var publish sdktrace.ReadOnlySpan
	var delivers []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "publish":
			if publish != nil {
				t.Fatalf("two publish spans: the untraced publish made one")
			}
			publish = sp
		case "deliver":
			delivers = append(delivers, sp)
		}
	}
	if publish == nil || len(delivers) != 2 {
		t.Fatalf("spans: publish %v, %d deliver; want 1 and 2", publish != nil, len(delivers))
	}
	if publish.SpanKind() != trace.SpanKindProducer || publish.Parent().SpanID() != root.SpanContext().SpanID() || !hasAttr(publish, "messaging.destination.name", "acme:orders.new") {
		t.Errorf("publish span: kind %v, parent %v (root %v), attributes %v", publish.SpanKind(), publish.Parent().SpanID(), root.SpanContext().SpanID(), publish.Attributes())
	}
	ids := map[string]sdktrace.ReadOnlySpan{}
	for _, d := range delivers {
		if d.SpanKind() != trace.SpanKindConsumer || d.Parent().SpanID() != publish.SpanContext().SpanID() || d.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("deliver span: kind %v, parent %v (publish %v), trace %v", d.SpanKind(), d.Parent().SpanID(), publish.SpanContext().SpanID(), d.SpanContext().TraceID())
		}
		ids[d.SpanContext().SpanID().String()] = d
	}
	for _, m := range got {
		switch {
		case m.Message == "untraced" && m.Traceparent() != "":
			t.Errorf("the untraced delivery carries %q", m.Traceparent())
		case m.Message == "traced":
			d := ids[spanIDOf(m.Traceparent())]
			if d == nil {
				t.Fatalf("attempt %d carries %q: no deliver span of it", m.Attempt, m.Traceparent())
			}
			failed := d.Status().Code == otelcodes.Error
			if failed != (m.Attempt == 1) || !hasAttr(d, "messaging.destination.subscription.name", "acme:one") {
				t.Errorf("attempt %d's span: status %v, attributes %v", m.Attempt, d.Status(), d.Attributes())
			}
		}
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, key, value string) bool {
	for _, a := range s.Attributes() {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}

// An untraced publish allocates as much with a recording tracer provider
// as with a no-op one: spans cost nothing when the message is in no trace.
func TestPublishAllocsUntraced(t *testing.T) {
	allocs := func(tp trace.TracerProvider) float64 {
		h := newHarness(t, nil)
		s := h.service(func(c *Config) { c.TracerProvider = tp })
		msg := &grain.Message{Message: "x"}
		pub := func() {
			if _, err := s.Publish(t.Context(), "P:acme:p", "orders.new", msg); err != nil {
				t.Fatal(err)
			}
		}
		pub()
		// The least of several runs: the batcher and the acker run
		// beside the publishes and allocate at their own pace.
		n := testing.AllocsPerRun(200, pub)
		for range 4 {
			n = min(n, testing.AllocsPerRun(200, pub))
		}
		return n
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	off, on := allocs(noop.NewTracerProvider()), allocs(tp)
	t.Logf("allocations per untraced publish: %.1f without a tracer, %.1f with", off, on)
	// A span would cost a dozen allocations; one is the noise of the
	// goroutines beside.
	if on > off+1 {
		t.Errorf("an untraced publish allocates %.1f with a tracer provider, %.1f without", on, off)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans of untraced publishes", n)
	}
}
