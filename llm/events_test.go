package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// echoModel answers each request with "re: " and its last message.
func echoModel() *fakemodel.Server {
	return fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		return fakemodel.Step{Text: "re: " + r.LastMessage().Text}
	})
}

// inbox is a stub agent type that keeps what it is sent.
type inbox struct {
	mu  sync.Mutex
	got []*grain.Message
}

func (in *inbox) handle(_ context.Context, m *grain.Message) (*grain.Message, error) {
	in.mu.Lock()
	in.got = append(in.got, m)
	in.mu.Unlock()
	return m.Response(), nil
}

func (in *inbox) messages() []*grain.Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]*grain.Message(nil), in.got...)
}

// registerHelper registers def's type in env, on env's clock.
func registerHelper(t *testing.T, env *graintest.Env, def llm.Definition, opts ...llm.Option) {
	t.Helper()
	opts = append([]llm.Option{llm.WithGetenv(getenv), llm.WithMaxRetries(0), llm.WithClock(env)}, opts...)
	if err := llm.Register(env.Registry, def, opts...); err != nil {
		t.Fatal(err)
	}
}

func conversationOf(t *testing.T, env *graintest.Env, addr string) llm.Conversation {
	t.Helper()
	// The conversation skill runs beside a turn: a request the agent
	// refuses, queued behind what was sent before, waits for those first.
	if _, err := env.Ask(t.Context(), addr, &grain.Message{MessageType: barrier}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("barrier: %v", err)
	}
	r, err := env.Ask(t.Context(), addr, &grain.Message{MessageType: llm.SkillConversation, DataType: grain.JSONType})
	if err != nil {
		t.Fatal(err)
	}
	var c llm.Conversation
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEventsStartTurns: a one-way message and an event with text each
// run a turn, on behalf of the principal the runtime stamped, its answer
// recorded and sent nowhere; with a reply_to of the principal's, the
// answer goes there as an llm.answer; a reply_to of another owner's agent
// gets nothing; messages that are not text start no turn.
func TestEventsStartTurns(t *testing.T) {
	env := graintest.New(t, graintest.WithPrincipal("alice"))
	srv := echoModel()
	defer srv.Close()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = nil
	registerHelper(t, env, def)
	sink := &inbox{}
	env.Stub("Sink", sink.handle)
	ctx := t.Context()

	if err := env.Send(ctx, "Helper:alice:h", &grain.Message{Message: "one-way hello"}); err != nil {
		t.Fatal(err)
	}
	if err := env.Send(ctx, "Helper:alice:h", &grain.Message{Kind: grain.KindEvent, Message: "an event", State: map[string]string{llm.ReplyToKey: "Sink:s"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Send(ctx, "Helper:alice:h", &grain.Message{Kind: grain.KindEvent, Message: "answer mallory", State: map[string]string{llm.ReplyToKey: "Sink:mallory:m"}}); err != nil {
		t.Fatal(err)
	}
	// Not text: no turn.
	if err := env.Send(ctx, "Helper:alice:h", &grain.Message{MessageType: llm.AnswerType, Message: "an answer of someone's"}); err != nil {
		t.Fatal(err)
	}
	if err := env.Send(ctx, "Helper:alice:h", &grain.Message{Kind: grain.KindEvent}); err != nil {
		t.Fatal(err)
	}
	c := conversationOf(t, env, "Helper:alice:h") // handled after the messages sent before it
	if len(c.Turns) != 3 || c.Current != nil {
		t.Fatalf("turns %+v, current %+v; want three ended", c.Turns, c.Current)
	}
	for i, want := range []string{llm.TriggerMessage, llm.TriggerEvent, llm.TriggerEvent} {
		if c.Turns[i].Trigger != want || c.Turns[i].Error != "" {
			t.Errorf("turn %d: %+v, want trigger %s", i, c.Turns[i], want)
		}
	}
	var texts []string
	for _, m := range c.Messages {
		texts = append(texts, m.Role+": "+m.Text)
	}
	if got := strings.Join(texts, " | "); got != "user: one-way hello | assistant: re: one-way hello | user: an event | assistant: re: an event | user: answer mallory | assistant: re: answer mallory" {
		t.Errorf("conversation: %s", got)
	}
	got := sink.messages()
	if len(got) != 1 || got[0].MessageType != llm.AnswerType || got[0].Message != "re: an event" || got[0].To != "Sink:alice:s" || got[0].State["turn"] != c.Turns[1].ID {
		t.Fatalf("the sink got %v; want the event's answer only", got)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3", n)
	}
}

// TestKeyedMessageRunsOnce: a one-way message sent again with its
// idempotency key (after the runtime forgot the key: a new runtime on
// the same store) is answered from the record: one turn.
func TestKeyedMessageRunsOnce(t *testing.T) {
	srv := echoModel()
	defer srv.Close()
	store := grain.NewMemoryStateStore()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = nil
	for range 2 {
		e := start(t, def, envConfig{store: store})
		if err := e.rt.Send(t.Context(), &grain.Message{From: session, To: "Helper:alice:h", Message: "once", IdempotencyKey: "k1"}); err != nil {
			t.Fatal(err)
		}
		if c := e.conversation(t, "Helper:alice:h"); len(c.Turns) != 1 || c.Turns[0].Trigger != llm.TriggerMessage {
			t.Fatalf("turns %+v", c.Turns)
		}
		e.close(t)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
}
