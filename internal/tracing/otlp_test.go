package tracing

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// receiver is an OTLP/gRPC trace receiver that keeps what it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name -> service.instance.id of its resource
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var inst, svc string
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.GetKey() {
			case "service.instance.id":
				inst = kv.GetValue().GetStringValue()
			case "service.name":
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans[sp.GetName()] = svc + "/" + inst
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *receiver) got(name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.spans[name]
	return v, ok
}

func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{spans: map[string]string{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return r, lis.Addr().String()
}

// Spans reach an OTLP receiver named by the endpoint or by the standard
// environment, with the silo in their resource; without either nothing is
// exported; a bad endpoint or protocol is refused.
func TestOTLP(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, testutil.LeakOptions()...) }) // after the receiver stopped
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
	if tp, err := StartOTLP(t.Context(), OTLPConfig{Instance: "s0"}); tp != nil || err != nil {
		t.Fatalf("no endpoint: %v, %v; want no provider", tp, err)
	}
	for _, bad := range []string{"127.0.0.1:4317", "ftp://x:1", "http://"} {
		if _, err := StartOTLP(t.Context(), OTLPConfig{Endpoint: bad}); err == nil || !strings.Contains(err.Error(), "want http://host:port") {
			t.Errorf("endpoint %q: %v", bad, err)
		}
	}

	r, addr := startReceiver(t)
	for _, c := range []struct {
		name string
		cfg  OTLPConfig
		env  string
		want string
	}{
		{"flag", OTLPConfig{Endpoint: "http://" + addr, Instance: "s0"}, "", "agentsilo/s0"},
		{"env", OTLPConfig{Instance: "s1"}, "http://" + addr, "billing/s1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.env)
				t.Setenv("OTEL_SERVICE_NAME", "billing")
			}
			tp, err := StartOTLP(t.Context(), c.cfg)
			if err != nil || tp == nil {
				t.Fatalf("StartOTLP: %v, %v", tp, err)
			}
			span := "peer Ask " + c.name
			_, sp := New(tp).Start(t.Context(), span, trace.SpanKindServer, &agentsilov1.AgentMessage{To: "Echo:o:a"})
			End(sp, nil)
			if err := tp.Shutdown(t.Context()); err != nil { // flushes
				t.Fatal(err)
			}
			got, ok := r.got(span)
			if !ok || got != c.want {
				t.Fatalf("span %q at the receiver: %q, %v; want resource %q", span, got, ok, c.want)
			}
		})
	}

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	if _, err := StartOTLP(t.Context(), OTLPConfig{Endpoint: "http://" + addr}); err == nil || !strings.Contains(err.Error(), "only grpc") {
		t.Errorf("http/protobuf: %v", err)
	}
}
