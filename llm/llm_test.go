package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// AddIn and AddOut are the typed skill of Counter, the tool agent.
type AddIn struct {
	N int `json:"n" jsonschema:"how much to add"`
}

type AddOut struct {
	Total int `json:"total"`
}

// counter is a cluster agent with one typed skill, add, that adds to a
// total kept in its durable state: its side effect. If hold is set, add
// tells entered after its save and waits for hold (or its ctx).
type counter struct {
	n       *grain.State[int]
	entered chan<- struct{}
	hold    <-chan struct{}
}

func (c *counter) OnActivate(ctx context.Context) error { return c.n.Load(ctx) }

func (c *counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.MessageType != "add" {
		r := m.Response()
		r.Message = fmt.Sprint(c.n.Value)
		return r, nil
	}
	return grain.TypedHandler(func(ctx context.Context, in AddIn) (AddOut, error) {
		if err := c.n.Update(ctx, func(v *int) error { *v += in.N; return nil }); err != nil {
			return AddOut{}, err
		}
		if c.entered != nil {
			c.entered <- struct{}{}
		}
		if c.hold != nil {
			select {
			case <-c.hold:
			case <-ctx.Done():
				return AddOut{}, ctx.Err()
			}
		}
		return AddOut{Total: c.n.Value}, nil
	})(ctx, m)
}

func registerCounter(t *testing.T, reg *grain.Registry, entered chan<- struct{}, hold <-chan struct{}) {
	t.Helper()
	err := reg.Register("Counter", func(h grain.Host) (grain.Agent, error) {
		return &counter{n: grain.NewState[int](h), entered: entered, hold: hold}, nil
	}, grain.TypeInfo{Description: "Keeps a total.", Skills: []grain.Skill{grain.TypedSkill[AddIn, AddOut]("add", "Add n to the total and return it.")}})
	if err != nil {
		t.Fatal(err)
	}
}

// pusher takes what agents push to client sessions.
type pusher struct {
	mu  sync.Mutex
	got []*grain.Message
}

func (p *pusher) DeliverToSession(_ context.Context, w *agentsilov1.AgentMessage) error {
	m := grain.MessageFromProto(w)
	p.mu.Lock()
	p.got = append(p.got, m)
	p.mu.Unlock()
	return nil
}

func (p *pusher) messages() []*grain.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*grain.Message(nil), p.got...)
}

// env is a runtime with a model agent type, a Counter, and a state store.
type env struct {
	rt     *grain.Runtime
	store  grain.StateStore
	pushes *pusher
}

type envConfig struct {
	store      grain.StateStore
	authorizer grain.Authorizer
	entered    chan<- struct{}
	hold       <-chan struct{}
}

func definition(provider, url string) llm.Definition {
	return llm.Definition{
		Type:         "Helper",
		Model:        llm.Model{Provider: provider, BaseURL: url, Name: "fake-model", APIKeyEnv: "FAKE_MODEL_KEY"},
		SystemPrompt: "You keep totals.",
		Tools:        []llm.ToolRef{{Agent: "Counter"}},
	}
}

func baseURL(srv *fakemodel.Server, provider string) string {
	if provider == llm.ProviderOpenAI {
		return srv.OpenAIURL()
	}
	return srv.URL()
}

func getenv(name string) (string, bool) {
	if name == "FAKE_MODEL_KEY" {
		return "test-key", true
	}
	return "", false
}

func start(t *testing.T, def llm.Definition, ec envConfig, opts ...llm.Option) *env {
	t.Helper()
	reg := grain.NewRegistry()
	registerCounter(t, reg, ec.entered, ec.hold)
	opts = append([]llm.Option{llm.WithGetenv(getenv), llm.WithMaxRetries(2)}, opts...)
	if err := llm.Register(reg, def, opts...); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = testutil.Logger()
	if ec.store == nil {
		ec.store = grain.NewMemoryStateStore()
	}
	cfg.State = ec.store
	cfg.Authorizer = ec.authorizer
	p := &pusher{}
	siloapi.Wire(&cfg, siloapi.Wiring{Sessions: p})
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{rt: rt, store: ec.store, pushes: p}
	t.Cleanup(func() { e.close(t) })
	return e
}

func (e *env) close(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.rt.Close(ctx); err != nil {
		t.Error(err)
	}
}

const session = "Session:alice:s1"

func (e *env) ask(ctx context.Context, to, text, key string) (*grain.Message, error) {
	return e.rt.Ask(ctx, &grain.Message{From: session, To: to, Message: text, IdempotencyKey: key})
}

// barrier is a message type a model agent refuses.
const barrier = "test.barrier"

func (e *env) conversation(t *testing.T, to string) llm.Conversation {
	t.Helper()
	// The conversation skill runs beside a turn: a request the agent
	// refuses, queued behind what was sent before, waits for those first.
	if _, err := e.rt.Ask(t.Context(), &grain.Message{From: session, To: to, MessageType: barrier}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("barrier: %v", err)
	}
	r, err := e.rt.Ask(t.Context(), &grain.Message{From: session, To: to, MessageType: llm.SkillConversation, DataType: grain.JSONType})
	if err != nil {
		t.Fatal(err)
	}
	var c llm.Conversation
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) total(t *testing.T, alias string) int {
	t.Helper()
	data, _, err := e.store.Load(t.Context(), grain.Address{Type: "Counter", Owner: "alice", Alias: alias})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if len(data) > 0 {
		if err := json.Unmarshal(data, &n); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func addCall(id, alias string, n int) fakemodel.ToolCall {
	return fakemodel.ToolCall{ID: id, Name: "Counter_add", Arguments: fmt.Sprintf(`{"agent": %q, "input": {"n": %d}}`, alias, n)}
}

// The loop through both official SDKs, streamed and not: the model calls
// Counter's typed skill add twice in one step (run concurrently), gets
// the results, and answers; the conversation is recorded with its token
// counts, and progress is pushed to the calling session.
func TestLoop(t *testing.T) {
	for _, provider := range []string{llm.ProviderOpenAI, llm.ProviderAnthropic} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", provider, stream), func(t *testing.T) {
				srv := fakemodel.New(
					fakemodel.Step{ToolCalls: []fakemodel.ToolCall{addCall("c1", "a", 2), addCall("c2", "b", 3)}, InputTokens: 20, OutputTokens: 8},
					fakemodel.Step{Text: "The totals are 2 and 3.", InputTokens: 40, OutputTokens: 9},
				)
				defer srv.Close()
				e := start(t, definition(provider, baseURL(srv, provider)), envConfig{}, llm.WithStreaming(stream))
				r, err := e.ask(t.Context(), "Helper:h", "add 2 to a and 3 to b", "")
				if err != nil {
					t.Fatal(err)
				}
				if r.Message != "The totals are 2 and 3." {
					t.Errorf("answer %q", r.Message)
				}
				if a, b := e.total(t, "a"), e.total(t, "b"); a != 2 || b != 3 {
					t.Errorf("totals %d %d, want 2 3", a, b)
				}
				reqs := srv.Requests()
				if len(reqs) != 2 {
					t.Fatalf("%d model requests, want 2", len(reqs))
				}
				first, second := reqs[0], reqs[1]
				if first.API != provider || first.Stream != stream || first.Model != "fake-model" || first.System != "You keep totals." ||
					len(first.Tools) != 1 || first.Tools[0] != "Counter_add" || first.LastMessage().Text != "add 2 to a and 3 to b" {
					t.Errorf("first request: %+v", first)
				}
				var schema struct {
					Properties map[string]json.RawMessage
				}
				if err := json.Unmarshal(first.Schemas["Counter_add"], &schema); err != nil || schema.Properties["agent"] == nil || !strings.Contains(string(schema.Properties["input"]), `"n"`) {
					t.Errorf("Counter_add's schema: %s", first.Schemas["Counter_add"])
				}
				results := map[string]string{}
				for _, m := range second.Messages {
					if m.Role == "tool" {
						results[m.ToolCallID] = m.Data
						if m.Label != "agent-message" {
							t.Errorf("the result of %s is fenced as %q, want agent-message (an agent's reply)", m.ToolCallID, m.Label)
						}
					}
				}
				if results["c1"] != `{"total":2}` || results["c2"] != `{"total":3}` {
					t.Errorf("tool results sent: %v", results)
				}
				c := e.conversation(t, "Helper:h")
				if len(c.Messages) != 5 || c.Current != nil || len(c.Turns) != 1 || c.Turns[0].Rounds != 2 ||
					c.Usage.InputTokens != 60 || c.Usage.OutputTokens != 17 || c.Turns[0].Usage != c.Usage {
					t.Errorf("conversation: %+v", c)
				}
				var progress, deltas int
				for _, m := range e.pushes.messages() {
					switch m.MessageType {
					case llm.ProgressType:
						progress++
					case llm.ProgressDelta:
						deltas++
					}
				}
				if progress < 4 || (deltas > 0) != stream {
					t.Errorf("pushed %d progress lines and %d deltas (stream %v)", progress, deltas, stream)
				}

				// The next turn goes on with the conversation.
				srv.Add(fakemodel.Step{Text: "You asked me to add."})
				if r, err := e.ask(t.Context(), "Helper:h", "what did I ask?", ""); err != nil || r.Message != "You asked me to add." {
					t.Fatalf("second turn: %v %v", r, err)
				}
				third := srv.Requests()[2]
				if len(third.Messages) != 6 || third.Messages[0].Text != "add 2 to a and 3 to b" {
					t.Errorf("the second turn sent %d messages: %+v", len(third.Messages), third.Messages)
				}
			})
		}
	}
}
