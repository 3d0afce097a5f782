package a2a_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// A model agent asked by the A2A SDK's client in two contexts: each
// context is a conversation of its own, kept by the context's agent, and
// the same context goes on with its conversation; a caller that names no
// context (the SDK) has the agent's own. The conversations are listed by
// owner and deleted in one call.
func TestModelAgentContextsOverA2A(t *testing.T) {
	e := etcdtest.Start(t)
	// The model answers with what it was sent: the user's messages so far.
	srv := llmtest.NewFunc(func(r llmtest.Request) llmtest.Step {
		var said []string
		for _, m := range r.Messages {
			if m.Role == "user" {
				said = append(said, m.Data)
			}
		}
		return llmtest.Step{Text: strings.Join(said, " | ")}
	})
	defer srv.Close()
	s := modelSilo(t, e, "/contexts/", "type: Chat\nmodel: {provider: openai, base_url: "+srv.OpenAIURL()+", name: fake-1}\n")
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)
	cl := dial(t, s, "Chat/dev/main", "JSONRPC", dev)

	inContext := func(ctxID, say string) string {
		t.Helper()
		req := text(say)
		req.Message.ContextID = ctxID
		task := asTask(cl.SendMessage(t.Context(), req))
		if task.Status.State != spec.TaskStateCompleted || task.ContextID != ctxID {
			t.Fatalf("%s in %s: %s in context %s, want completed in the same", say, ctxID, task.Status.State, task.ContextID)
		}
		return artifactText(task)
	}
	if got := inContext("ctx-a", "one"); got != "one" {
		t.Fatalf("context a's first turn saw %q", got)
	}
	if got := inContext("ctx-b", "two"); got != "two" {
		t.Fatalf("context b's first turn saw %q, want its own conversation", got)
	}
	if got := inContext("ctx-a", "three"); got != "one | three" {
		t.Fatalf("context a's second turn saw %q, want its conversation continued", got)
	}
	sdk := dialSilo(t, s, client.WithPrincipal("dev"))
	if r, err := sdk.Ask(t.Context(), "Chat:dev:main", &client.Message{Message: "four"}); err != nil || r.Message != "four" {
		t.Fatalf("the SDK's turn, without a context: %v %v, want the agent's own conversation", r, err)
	}

	base := grain.Address{Type: "Chat", Owner: "dev", Alias: "main"}
	ctxA := grain.ContextAddress(base, "ctx-a").String()
	raw, err := sdk.Conversations().Get(t.Context(), ctxA)
	if err != nil {
		t.Fatal(err)
	}
	var rec llm.Conversation
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Context != "ctx-a" || len(rec.Turns) != 2 {
		t.Fatalf("context a's record: context %q, %d turns", rec.Context, len(rec.Turns))
	}
	listed, err := sdk.Conversations().List(t.Context(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ctxA, grain.ContextAddress(base, "ctx-b").String(), base.String()}
	if len(listed) != 3 {
		t.Fatalf("conversations of dev: %q, want %q in some order", listed, want)
	}
	for _, w := range want {
		if !strings.Contains(strings.Join(listed, " "), w) {
			t.Fatalf("conversations of dev: %q, want %q among them", listed, w)
		}
	}
	if n, err := sdk.Conversations().DeleteAll(t.Context(), "dev"); err != nil || n != 3 {
		t.Fatalf("delete dev's conversations: %d %v, want 3", n, err)
	}
	if listed, err := sdk.Conversations().List(t.Context(), "dev"); err != nil || len(listed) != 0 {
		t.Fatalf("conversations of dev after deleting them: %q %v", listed, err)
	}
	if got := inContext("ctx-a", "five"); got != "five" {
		t.Fatalf("context a after deletion saw %q, want a new conversation", got)
	}
}

// Two model agent types that share sessions, asked by the A2A SDK's
// client in one context: the second agent's turn gets what the first was
// asked and answered; in another context it gets nothing of it. The
// session is one of the owner's conversations, deleted with them.
func TestSharedSessionOverA2A(t *testing.T) {
	e := etcdtest.Start(t)
	// The model answers with the last user message it was sent, whole.
	srv := llmtest.NewFunc(func(r llmtest.Request) llmtest.Step {
		return llmtest.Step{Text: "seen: " + r.LastMessage().Text}
	})
	defer srv.Close()
	def := "model: {provider: openai, base_url: " + srv.OpenAIURL() + ", name: fake-1}\nconversation: {shared: true}\n"
	s := modelSilo(t, e, "/shared/", "type: Travel\n"+def, "type: Booking\n"+def)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)
	travel := dial(t, s, "Travel/dev/t", "JSONRPC", dev)
	booking := dial(t, s, "Booking/dev/b", "JSONRPC", dev)
	send := func(cl interface {
		SendMessage(context.Context, *spec.SendMessageRequest) (spec.SendMessageResult, error)
	}, ctxID, say string) string {
		t.Helper()
		req := text(say)
		req.Message.ContextID = ctxID
		task := asTask(cl.SendMessage(t.Context(), req))
		if task.Status.State != spec.TaskStateCompleted {
			t.Fatalf("%s in %s: %s", say, ctxID, task.Status.State)
		}
		return artifactText(task)
	}
	send(travel, "trip-1", "I am Ada and I fly to Lisbon")
	got := send(booking, "trip-1", "book a hotel")
	for _, want := range []string{"Travel:dev:t was asked: I am Ada and I fly to Lisbon", "Travel:dev:t answered: seen: ", "<<data label=agent-message from=session", "\nbook a hotel"} {
		if !strings.Contains(got, want) {
			t.Errorf("Booking, in the session Travel shares, was sent\n%s\nwant %q in it", got, want)
		}
	}
	if got := send(booking, "trip-2", "book a hotel"); strings.Contains(got, "Travel") || !strings.Contains(got, "book a hotel") {
		t.Errorf("Booking in another context was sent %q", got)
	}

	sdk := dialSilo(t, s, client.WithPrincipal("dev"))
	listed, err := sdk.Conversations().List(t.Context(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	sessions := 0
	for _, a := range listed {
		if strings.HasPrefix(a, llm.SharedSessionType+":dev:") {
			sessions++
		}
	}
	if len(listed) != 5 || sessions != 2 {
		t.Fatalf("conversations of dev: %q, want three agents' and two sessions'", listed)
	}
	if n, err := sdk.Conversations().DeleteAll(t.Context(), "dev"); err != nil || n != 5 {
		t.Fatalf("delete dev's conversations: %d %v, want 5", n, err)
	}
	if got := send(booking, "trip-1", "book a hotel"); strings.Contains(got, "Travel") || !strings.Contains(got, "book a hotel") {
		t.Errorf("Booking after the session was deleted was sent %q", got)
	}
}

// modelSilo starts a silo on e, under prefix, serving A2A and the model
// agent types of defs (definitions, as YAML).
func modelSilo(t *testing.T, e *etcdtest.Server, prefix string, defs ...string) *cluster.Silo {
	t.Helper()
	reg := grain.NewRegistry()
	for _, d := range defs {
		def, err := llm.ParseDefinition([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		if err := llm.Register(reg, def, llm.WithMaxRetries(0)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.A2A.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testutil.Logger()
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}
