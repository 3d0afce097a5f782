package tests

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

type tallyIn struct {
	By int64 `json:"by"`
}

type tallyAgent struct{ n int64 }

func (a *tallyAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return grain.TypedHandler(func(_ context.Context, in tallyIn) (int64, error) {
		a.n += in.By
		return a.n, nil
	})(ctx, m)
}

// TestAskerReadingNoPushesGetsEveryReply: a program that only asks (it
// never reads Messages) asks a model agent turn after turn. Each turn
// pushes its progress to the program's session (a line per model call and
// tool call); once more of them came than the session's buffer holds, the
// replies must still come. They did not: the session stopped reading its
// stream at the first push that found the buffer full, and every later
// reply waited behind it until the Ask's deadline.
func TestAskerReadingNoPushesGetsEveryReply(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, append(testutil.LeakOptions(), ignore)...) }) // after the silo's Close
	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Tally_add", Arguments: `{"agent": "t", "input": {"by": 1}}`}.Respond)
	t.Cleanup(srv.Close)

	reg := grain.NewRegistry()
	err := reg.Register("Tally", func(grain.Host) (grain.Agent, error) { return &tallyAgent{}, nil },
		grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[tallyIn, int64]("add", "Adds by to the tally and returns it.")}})
	if err != nil {
		t.Fatal(err)
	}
	def := llm.Definition{
		Type:  "Looper",
		Model: llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-model", APIKeyEnv: "FAKE_MODEL_KEY"},
		Tools: []llm.ToolRef{{Agent: "Tally"}},
	}
	if err := llm.Register(reg, def, llm.WithGetenv(func(name string) (string, bool) { return "test-key", name == "FAKE_MODEL_KEY" })); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "one"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/unread/"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	silo, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := silo.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := silo.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	sdk, err := client.Dial(t.Context(), []string{silo.GatewayAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdk.Close() })

	// Three pushes a turn (two model calls, one tool call): 120 turns
	// push well over the buffer's 256.
	const turns = 120
	for i := range turns {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		r, err := sdk.Ask(ctx, "Looper:t", &client.Message{Message: "add one"})
		cancel()
		if err != nil {
			t.Fatalf("turn %d of %d: %v", i+1, turns, err)
		}
		if !strings.HasPrefix(r.Message, "done: ") {
			t.Fatalf("turn %d of %d: answer %q", i+1, turns, r.Message)
		}
	}
	// The pushes did fill the buffer (else this test tests nothing); those
	// it holds are the first ones.
	msgs := sdk.Messages()
	if len(msgs) != cap(msgs) {
		t.Fatalf("%d pushes of %d turns in a buffer of %d: the turns pushed too few to fill it", len(msgs), turns, cap(msgs))
	}
	if m := <-msgs; m.State[llm.StateProgress] != llm.ProgressType {
		t.Fatalf("first push %+v: want the first turn's progress", m)
	}
}
