package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestStandIn: the stand-in of a gateway with TLS and API keys speaks
// TLS, says NOT_SERVING to anyone, refuses a call without a key with
// Unauthenticated, and one with a key, unary or a session, with
// Unavailable and the reason it is given; the SDK's Dial fails with that.
func TestStandIn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newPKI(t)
	cfg := DefaultConfig()
	cfg.Auth = auth.Config{TLSCert: p.serverCert, TLSKey: p.serverKey, Keys: testKeys}
	const why = "silo s1 serves no calls: fenced: the lease expired"
	s, err := NewStandIn(cfg, func() string { return why })
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	defer func() {
		s.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	addr := lis.Addr().String()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, "", ""))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: agentsilov1.Gateway_ServiceDesc.ServiceName})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health: %v, %v; want NOT_SERVING", h.GetStatus(), err)
	}
	gw := agentsilov1.NewGatewayClient(conn)
	if _, err := gw.Ask(ctx, askReq("Echo:alice:x", "hi")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Ask without a key: %v, want Unauthenticated", err)
	}
	if _, err := gw.Ask(withKey(ctx, "alice-key"), askReq("Echo:alice:x", "hi")); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != why+refused {
		t.Errorf("Ask with a key: %v, want Unavailable %q", err, why+refused)
	}
	st, err := gw.Session(withKey(ctx, "alice-key"))
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != why+refused {
		t.Errorf("Session with a key: %v, want Unavailable %q", err, why+refused)
	}

	c, err := client.Dial(ctx, []string{addr}, client.WithTLS(p.clientTLS(t, "", "")), client.WithAPIKey("alice-key"))
	if err == nil {
		c.Close()
		t.Fatal("the SDK's Dial to a stand-in succeeded")
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), why) {
		t.Errorf("the SDK's Dial: %v, want Unavailable saying %q", err, why)
	}
	t.Logf("the SDK's Dial: %v", err)
}

// refused is what the stand-in adds to the reason it refuses a call for.
const refused = " (refused before it ran)"
