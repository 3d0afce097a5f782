package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
)

// An agent's own messages make spans: Front (on s1), handling a traced
// call, asks Near (on s1) and Far (on s2) and sends Far a one-way message.
// Each of Front's messages is a client span "call <Kind>", the child of
// Front's turn ("turn Ask", a server span under the gateway's); the
// callee's turn is a server span under it, directly on the same silo, and
// through the forward and peer spans across silos. Far logs through a
// runtime logger of the program's own (SiloConfig.Runtime.Logger), and its
// record carries its turn's trace and span ids. (Untraced messages make
// no spans and cost nothing: grain's TestAgentAskAllocsUntraced and the
// allocation guards of cluster/allocs_test.go.)
func TestAgentSpans(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	rec, tp, stopTracing := spanRecorder(t)
	defer stopTracing()
	c := newTestCluster(t)
	defer c.close()

	names := []string{"s1", "s2"}
	pick := func(typ, silo string) string {
		for i := 0; ; i++ {
			a := fmt.Sprintf("%s:alice:x%d", typ, i)
			if Owner(a, names) == silo {
				return a
			}
		}
	}
	front, near, far := pick("Front", "s1"), pick("Near", "s1"), pick("Far", "s2")
	logs := new(recordingHandler)
	echo := func(h grain.Host) (grain.Agent, error) {
		return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			h.Logger().InfoContext(ctx, "handled "+m.MessageType)
			return m.Response(), nil
		}), nil
	}
	configure := func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.TracerProvider = tp
		cfg.Runtime.Logger = slog.New(logs) // the program's own runtime logger
		err := reg.Register("Front", func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
				if _, err := h.Ask(ctx, near, &grain.Message{MessageType: "near"}); err != nil {
					return nil, err
				}
				if _, err := h.Ask(ctx, far, &grain.Message{MessageType: "far"}); err != nil {
					return nil, err
				}
				if err := h.Send(ctx, far, &grain.Message{MessageType: "far-oneway"}); err != nil {
					return nil, err
				}
				return m.Response(), nil
			}), nil
		})
		for _, typ := range []string{"Near", "Far"} {
			if err == nil {
				err = reg.Register(typ, echo)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s1 := c.startWith("s1", configure)
	c.startWith("s2", configure)
	c.waitView("s1", "s2")

	cl, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("alice"), client.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	ctx, root := tp.Tracer("test").Start(t.Context(), "root")
	if _, err := cl.Ask(ctx, front, grain.Text("go")); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()
	waitFor(t, "the one-way message's turn span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "turn Send" && s.SpanContext().TraceID() == traceID {
				return true
			}
		}
		return false
	})

	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == traceID {
			spans = append(spans, s)
		}
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	find := func(name, attr, value string) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, s := range spans {
			if s.Name() == name && (attr == "" || hasAttr(s, attr, value)) {
				return s
			}
		}
		t.Fatalf("no span %q with %s=%s; spans: %v", name, attr, value, spanNames(spans))
		return nil
	}
	parentOf := func(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan { return byID[s.Parent().SpanID()] }
	wantChild := func(child, parent sdktrace.ReadOnlySpan, kind trace.SpanKind) {
		t.Helper()
		if child.SpanKind() != kind {
			t.Errorf("span %q is of kind %v, want %v", child.Name(), child.SpanKind(), kind)
		}
		if p := parentOf(child); p == nil || p.SpanContext().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q (%v) is not the child of %q", child.Name(), child.Attributes(), parent.Name())
		}
	}

	gw := find("gateway Ask", "", "")
	frontTurn := find("turn Ask", "agentsilo.agent", front)
	wantChild(frontTurn, gw, trace.SpanKindServer)

	// Near, on the same silo: call, then its turn.
	callNear := find("call Ask", "agentsilo.to", near)
	wantChild(callNear, frontTurn, trace.SpanKindClient)
	wantChild(find("turn Ask", "agentsilo.agent", near), callNear, trace.SpanKindServer)

	// Far, on the other silo: call, forward, peer, then its turn.
	callFar := find("call Ask", "agentsilo.to", far)
	wantChild(callFar, frontTurn, trace.SpanKindClient)
	fwd := find("forward Ask", "agentsilo.to", far)
	wantChild(fwd, callFar, trace.SpanKindClient)
	peer := find("peer Ask", "agentsilo.to", far)
	wantChild(peer, fwd, trace.SpanKindServer)
	farTurn := find("turn Ask", "agentsilo.agent", far)
	wantChild(farTurn, peer, trace.SpanKindServer)

	// The one-way message: call Send, forward, peer, turn Send.
	callSend := find("call Send", "agentsilo.to", far)
	wantChild(callSend, frontTurn, trace.SpanKindClient)
	sendTurn := find("turn Send", "agentsilo.agent", far)
	if p := parentOf(sendTurn); p == nil || parentOf(p) == nil || parentOf(parentOf(p)) == nil ||
		parentOf(parentOf(p)).SpanContext().SpanID() != callSend.SpanContext().SpanID() {
		t.Errorf("Far's one-way turn does not descend from Front's call Send through forward and peer")
	}

	// Far's log record of its traced turn carries the turn's ids.
	var found bool
	for _, r := range logs.attrsOf("handled far") {
		if r["trace_id"] == traceID.String() {
			found = true
			if r["span_id"] != farTurn.SpanContext().SpanID().String() {
				t.Errorf("Far's log record has span_id %s, want its turn's %s", r["span_id"], farTurn.SpanContext().SpanID())
			}
		}
	}
	if !found {
		t.Errorf("no log record of Far's traced turn with trace_id %s: %v", traceID, logs.attrsOf("handled far"))
	}
}
