package tests

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// otlpReceiver is an OTLP/gRPC trace receiver that keeps the names of the
// spans it is sent, with the service.instance.id of their resource.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var inst string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.instance.id" {
				inst = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans[sp.GetName()] = inst
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// The silo program exports its spans to the OTLP receiver --otlp-endpoint
// names.
func TestSiloExportsOTLP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{spans: map[string]string{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis)
	defer srv.Stop()

	c := testcluster.Start(t, testcluster.Options{Silos: 1, Args: []string{"--otlp-endpoint", "http://" + lis.Addr().String()}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Client(t, 0).Ask(grain.WithTraceparent(ctx, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), "Echo:"+testcluster.Principal+":otlp", &client.Message{Message: "hi"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the gateway's span at the receiver", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.spans["gateway Ask"] == "silo-0"
	})
	c.Stop(0)
}
