package demoagents

import (
	"context"
	"strings"
	"testing"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pusher captures what agents push to client sessions.
type pusher struct{ got chan *grain.Message }

func (p pusher) DeliverToSession(_ context.Context, w *agentsilov1.AgentMessage) error {
	m := grain.MessageFromProto(w)
	p.got <- m
	return nil
}

func TestDemoAgents(t *testing.T) {
	reg := grain.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = grain.NewMemoryStateStore() // Counter keeps its count there
	p := pusher{got: make(chan *grain.Message, 10)}
	siloapi.Wire(&cfg, siloapi.Wiring{Sessions: p})
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const session = "Session:alice:s1"
	ask := func(to, text string, state map[string]string) string {
		t.Helper()
		r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: to, Message: text, State: state})
		if err != nil {
			t.Fatalf("ask %s %q: %v", to, text, err)
		}
		return r.Message
	}
	if got := ask("Echo:e", "hi", nil); got != "hi" {
		t.Errorf("Echo = %q", got)
	}
	ask("Counter:c", "", nil)
	ask("Counter:c", "add 5", nil)
	if got := ask("Counter:c", "get", nil); got != "6" {
		t.Errorf("Counter = %q", got)
	}
	if _, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Counter:c", Message: "add x"}); err == nil {
		t.Error("Counter add x: no error")
	}
	if got := ask("Progress:p", "q", nil); got != `done: q` {
		t.Errorf("Progress = %q", got)
	}
	for i := 1; i <= 3; i++ {
		m := <-p.got
		if m.To != session || m.From != "Progress:alice:p" || !strings.HasPrefix(m.Message, "thinking") {
			t.Errorf("push %d = %v", i, m)
		}
	}
	if got := ask("Pipeline:pl", "x", nil); got != "x (via Echo:pl-1 -> Echo:pl-2)" {
		t.Errorf("Pipeline = %q", got)
	}
	if _, err := rt.CreateAgent(t.Context(), "alice", "Pipeline:custom", map[string]string{"stages": "Counter:c,Echo:e"}); err != nil {
		t.Fatal(err)
	}
	if got := ask("Pipeline:custom", "get", nil); got != "6 (via Counter:c -> Echo:e)" {
		t.Errorf("configured Pipeline = %q", got)
	}
	got := ask("FanOut:f", "hey", map[string]string{"n": "4"})
	if !strings.HasPrefix(got, "4 replies: Echo:alice:f-0=hey #0; ") || strings.Count(got, "=hey #") != 4 {
		t.Errorf("FanOut = %q", got)
	}
}
