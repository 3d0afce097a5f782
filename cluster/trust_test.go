package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// startKeyedSilo starts a silo of the demo agents whose gateway takes API
// keys: "<principal>-key" for alice and ops. trusted turns the check of
// agents' messages off (--trusted-agents).
func startKeyedSilo(t *testing.T, trusted bool) (agentsilov1.GatewayClient, func(p string) context.Context) {
	t.Helper()
	reg := newTestRegistry(t)
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.Etcd.DataDir = t.TempDir()
	cfg.Etcd.EmbeddedAddr, cfg.Etcd.EmbeddedPeerAddr = testutil.FreeAddr(t), testutil.FreeAddr(t)
	cfg.Logger = testLogger()
	cfg.TrustedAgents = trusted
	for _, p := range []string{"alice", "ops"} {
		h := sha256.Sum256([]byte(p + "-key"))
		cfg.Gateway.Auth.Keys = append(cfg.Gateway.Auth.Keys, auth.APIKey{SHA256: hex.EncodeToString(h[:]), Principal: p})
	}
	s, err := NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	as := func(p string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-api-key", p+"-key")
	}
	return agentsilov1.NewGatewayClient(conn), as
}

// TestPipelineCannotBorrowRights is the confused-deputy attack: alice may
// not message Ticker:ops:t; she configures her own Pipeline with the stage
// Ticker:ops:t and asks it "stop". The Pipeline's Ask to ops's agent is
// checked as alice, the principal of its call chain: PermissionDenied, and
// ops's reminder survives. With --trusted-agents (the old mode) the same
// attack stops the reminder: the risk that flag takes.
func TestPipelineCannotBorrowRights(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		name := "checked"
		if trusted {
			name = "trusted-agents"
		}
		t.Run(name, func(t *testing.T) {
			leaks := append(leakOptions(), goleak.IgnoreCurrent())
			t.Cleanup(func() { goleak.VerifyNone(t, leaks...) }) // after the silo's Close
			gw, as := startKeyedSilo(t, trusted)
			ask := func(p, to, text string) error {
				_, err := gw.Ask(as(p), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: to, Message: text}})
				return err
			}
			if err := ask("ops", "Ticker:ops:t", "start 1m"); err != nil {
				t.Fatal(err)
			}
			if err := ask("alice", "Ticker:ops:t", "stop"); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("alice stops ops's Ticker directly: %v, want PermissionDenied", err)
			}
			if _, err := gw.CreateAgent(as("alice"), &agentsilov1.CreateAgentRequest{Address: "Pipeline:alice:p", Config: map[string]string{"stages": "Ticker:ops:t"}}); err != nil {
				t.Fatal(err)
			}
			err := ask("alice", "Pipeline:alice:p", "stop")
			rs, lerr := gw.ListReminders(as("ops"), &agentsilov1.ListRemindersRequest{Agent: "Ticker:ops:t"})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if !trusted {
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("alice stops ops's Ticker through her Pipeline: %v, want PermissionDenied", err)
				}
				if len(rs.Reminders) != 1 {
					t.Fatalf("ops's reminders after the attack: %v, want the one", rs.Reminders)
				}
				// Her Pipeline still works on what she may message.
				if _, err := gw.CreateAgent(as("alice"), &agentsilov1.CreateAgentRequest{Address: "Pipeline:alice:q", Config: map[string]string{"stages": "Echo:e1,Echo:system:e2"}}); err != nil {
					t.Fatal(err)
				}
				if err := ask("alice", "Pipeline:alice:q", "hi"); err != nil {
					t.Fatalf("a pipeline of alice's and shared agents: %v", err)
				}
				return
			}
			if err != nil || len(rs.Reminders) != 0 {
				t.Fatalf("with trusted agents: the attack gave %v and left reminders %v; want it to stop the reminder", err, rs.Reminders)
			}
		})
	}
}
