package inbox

import (
	"context"
	"testing"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// next records what the inboxes hand on.
type next struct{ got []*grain.Message }

func (n *next) DeliverToSession(_ context.Context, w *agentsilov1.AgentMessage) error {
	m := grain.MessageFromProto(w)
	n.got = append(n.got, m)
	return nil
}

// An open inbox takes what is pushed to its address, in order, up to the
// backlog; a closed one refuses with NotFound; other session addresses go
// to the next router.
func TestInboxes(t *testing.T) {
	nx := &next{}
	in := New("s1", nx)
	a, m := in.Open("alice", A2A), in.Open("alice", MCP)
	if !IsKind(a.Addr(), A2A) || IsKind(a.Addr(), MCP) || !IsKind(m.Addr(), MCP) || !Is(a.Addr()) || !Is(m.Addr()) {
		t.Fatalf("addresses %s, %s: kinds not recognized", a.Addr(), m.Addr())
	}
	if in.Len() != 2 {
		t.Fatalf("Len %d, want 2", in.Len())
	}
	for _, text := range []string{"one", "two"} {
		if err := in.DeliverToSession(t.Context(), &agentsilov1.AgentMessage{To: m.Addr(), Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	<-m.Signal()
	if got := m.Take(); len(got) != 2 || got[0].Message != "one" || got[1].Message != "two" {
		t.Fatalf("took %v", got)
	}
	for range Backlog {
		if err := in.DeliverToSession(t.Context(), &agentsilov1.AgentMessage{To: a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.DeliverToSession(t.Context(), &agentsilov1.AgentMessage{To: a.Addr()}); errs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("past the backlog: %v, want ResourceExhausted", err)
	}
	in.Close(m)
	if err := in.DeliverToSession(t.Context(), &agentsilov1.AgentMessage{To: m.Addr()}); errs.Code(err) != codes.NotFound {
		t.Fatalf("to a closed inbox: %v, want NotFound", err)
	}
	gw := &agentsilov1.AgentMessage{To: grain.SessionType + ":alice:0190c0de-0000-7000-8000-000000000000@s1"}
	if err := in.DeliverToSession(t.Context(), gw); err != nil || len(nx.got) != 1 || nx.got[0].To != gw.To {
		t.Fatalf("a gateway session's message: %v, handed on %v", err, nx.got)
	}
	if err := New("s1", nil).DeliverToSession(t.Context(), gw); errs.Code(err) != codes.NotFound {
		t.Fatalf("without a next router: %v, want NotFound", err)
	}
}
