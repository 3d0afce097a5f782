package cluster

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func TestSiloLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Etcd.DataDir = t.TempDir()
	cfg.Etcd.EmbeddedAddr, cfg.Etcd.EmbeddedPeerAddr = testutil.FreeAddr(t), testutil.FreeAddr(t)
	s, err := NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close(context.Background())
		}
	}()

	conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", hc, err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-agentsilo-principal", "alice")
	r, err := agentsilov1.NewGatewayClient(conn).Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Counter:c", Message: "add 2"}})
	if err != nil || r.Message.Message != "2" || r.Message.From != "Counter:alice:c" {
		t.Fatalf("ask = %v, %v", r, err)
	}
	// Server reflection lists the gateway (what grpcurl uses).
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	listed, err := refl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	refl.CloseSend()
	found := false
	for _, svc := range listed.GetListServicesResponse().GetService() {
		found = found || svc.Name == agentsilov1.Gateway_ServiceDesc.ServiceName
	}
	if !found {
		t.Fatalf("reflection lists %v, not the gateway", listed.GetListServicesResponse().GetService())
	}

	gc := agentsilov1.NewGatewayClient(conn)
	if _, err := gc.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Ticker:t", Message: "start 2m"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Ask(ctx, &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: "Ticker:t", Message: "start 5s"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("reminder period under the minimum: %v, want InvalidArgument", err)
	}
	rs, err := gc.ListReminders(ctx, &agentsilov1.ListRemindersRequest{Agent: "Ticker:t"})
	if err != nil || len(rs.Reminders) != 1 || rs.Reminders[0].Name != "tick" || rs.Reminders[0].Period.AsDuration() != 2*time.Minute {
		t.Fatalf("ListReminders = %v, %v", rs, err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s = %d %s", path, resp.StatusCode, body)
		}
	}
	closed = true
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := s.Runtime().Len(); n != 0 {
		t.Fatalf("%d activations left after Close", n)
	}
}

func TestSiloRefusesBadConfig(t *testing.T) {
	reg := grain.NewRegistry()
	cfg := DefaultSiloConfig()
	cfg.GatewayAddr = "0.0.0.0:0"
	cfg.HTTPAddr = ""
	if _, err := NewSilo(cfg, reg); err == nil {
		t.Fatal("NewSilo accepted a non-loopback gateway without --insecure")
	}
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.Runtime.MailboxSize = 0
	if _, err := NewSilo(cfg, reg); err == nil {
		t.Fatal("NewSilo accepted MailboxSize 0")
	}
}
