package cluster

import (
	"context"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
)

// One trace from the SDK through a publish to a subscriber, in a real silo
// on a real etcd: the client's Ask reaches Pub, whose turn publishes; the
// publish is a producer span under Pub's turn (under the gateway's span
// when the silo makes no turn spans), the delivery a consumer span under
// the publish, all in the caller's trace; Sub's message carries its
// delivery's span, and Sub's turn, if the silo makes turn spans, is the
// delivery's child.
func TestTopicsTraceThroughSilo(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	rec, tp, stopTracing := spanRecorder(t)
	defer stopTracing()
	c := newTestCluster(t)
	defer c.close()
	var subSaw atomic.Value
	s := c.startWith("s1", func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.TracerProvider = tp
		err := reg.Register("Pub", func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
				if _, err := h.Publish(ctx, "orders.new", grain.Text("order 1")); err != nil {
					return nil, err
				}
				return m.Response(), nil
			}), nil
		})
		if err == nil {
			err = reg.Register("Sub", func(h grain.Host) (grain.Agent, error) {
				return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
					if m.Topic != "" {
						subSaw.Store(m.Traceparent())
					}
					return m.Response(), nil
				}), nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	cl, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("alice"), client.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Topics().Subscribe(t.Context(), "Sub:alice:s", "audit", "orders.#"); err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("test").Start(t.Context(), "root")
	if _, err := cl.Ask(ctx, "Pub:alice:p", grain.Text("go")); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()
	byName := func() map[string]sdktrace.ReadOnlySpan {
		m := map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() != traceID {
				continue
			}
			name := sp.Name()
			if name == "turn Ask" && hasAttr(sp, "agentsilo.agent", "Sub:alice:s") {
				name = "turn Ask (Sub)"
			}
			m[name] = sp
		}
		return m
	}
	waitFor(t, "the delivery's span", func() bool { return byName()["deliver"] != nil })
	spans := byName()
	chain := []string{"root", "agentsilo Ask", "gateway Ask", "turn Ask", "publish", "deliver", "turn Ask (Sub)"}
	if spans["turn Ask"] == nil {
		// No turn spans: the publish continues the message Pub handled.
		chain = []string{"root", "agentsilo Ask", "gateway Ask", "publish", "deliver"}
	}
	for i, name := range chain {
		sp := spans[name]
		if sp == nil {
			t.Fatalf("no span %q in the trace; spans: %v", name, spanNames(rec.Ended()))
		}
		if i > 0 && sp.Parent().SpanID() != spans[chain[i-1]].SpanContext().SpanID() {
			t.Errorf("span %q is not the child of %q", name, chain[i-1])
		}
	}
	if k := spans["publish"].SpanKind(); k != trace.SpanKindProducer || !hasAttr(spans["publish"], "messaging.destination.name", "alice:orders.new") {
		t.Errorf("publish span: kind %v, attributes %v", k, spans["publish"].Attributes())
	}
	if k := spans["deliver"].SpanKind(); k != trace.SpanKindConsumer || !hasAttr(spans["deliver"], "messaging.destination.subscription.name", "alice:audit") {
		t.Errorf("deliver span: kind %v, attributes %v", k, spans["deliver"].Attributes())
	}
	if tp0, _ := subSaw.Load().(string); tp0 == "" || !containsSpanID(tp0, spans["deliver"].SpanContext().SpanID()) {
		t.Errorf("Sub's delivery carries %q, not the deliver span %s", tp0, spans["deliver"].SpanContext().SpanID())
	}
}

// containsSpanID reports whether traceparent tp names span id.
func containsSpanID(tp string, id trace.SpanID) bool {
	return len(tp) == 55 && tp[36:52] == id.String()
}
