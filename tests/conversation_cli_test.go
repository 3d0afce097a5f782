package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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

// conversationSilo is a silo in this process (on a real etcd, its gateway
// on real gRPC) with model agents whose model is a fakemodel server, and
// Gate, the tool they call, whose skill wait holds until the test opens
// the gate.
type conversationSilo struct {
	silo    *cluster.Silo
	sdk     *client.Client
	bin     string      // the client program
	entered chan string // a wait began (its step)

	mu   sync.Mutex
	gate chan struct{} // closed: waits return; see hold and open
}

// the fake model: a prompt "add it up" calls Gate's wait (100 tokens in,
// 20 out), its result gets "all done" (150, 30); any other prompt gets
// "hello there" (7, 3).
func conversationModel(r fakemodel.Request) fakemodel.Step {
	last := r.LastMessage()
	switch {
	case last.Role == "tool":
		return fakemodel.Step{Text: "all done", InputTokens: 150, OutputTokens: 30}
	case last.Data == "add it up":
		return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "w1", Name: "Gate_wait", Arguments: `{"agent": "g", "input": {"step": "one"}}`}}, InputTokens: 100, OutputTokens: 20}
	}
	return fakemodel.Step{Text: "hello there", InputTokens: 7, OutputTokens: 3}
}

func startConversationSilo(t *testing.T) *conversationSilo {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, append(testutil.LeakOptions(), ignore)...) }) // after the silo's Close
	srv := fakemodel.NewFunc(conversationModel)
	t.Cleanup(srv.Close)
	s := &conversationSilo{entered: make(chan string, 4)}
	s.hold()
	t.Cleanup(s.open) // a test that failed holding the gate lets the turn end

	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/client").CombinedOutput(); err != nil {
		t.Fatalf("build the client: %v\n%s", err, out)
	}
	s.bin = bin

	reg := grain.NewRegistry()
	type waitIn struct {
		Step string `json:"step"`
	}
	wait := grain.TypedHandler(func(ctx context.Context, in waitIn) (string, error) {
		s.mu.Lock()
		gate := s.gate
		s.mu.Unlock()
		s.entered <- in.Step
		select {
		case <-gate:
			return "step " + in.Step + " waited", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	err := reg.Register("Gate", func(grain.Host) (grain.Agent, error) { return gateAgent{wait}, nil },
		grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[waitIn, string]("wait", "Waits for the gate.")}})
	if err != nil {
		t.Fatal(err)
	}
	def := func(typ string) llm.Definition {
		return llm.Definition{
			Type:         typ,
			Model:        llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-model", APIKeyEnv: "FAKE_MODEL_KEY"},
			SystemPrompt: "You add numbers.",
			Tools:        []llm.ToolRef{{Agent: "Gate"}},
		}
	}
	opts := []llm.Option{llm.WithGetenv(func(name string) (string, bool) { return "test-key", name == "FAKE_MODEL_KEY" }), llm.WithMaxRetries(0)}
	// Model: registered as a program registers a model type.
	if err := llm.Register(reg, def("Model"), opts...); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "one"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/conversation/"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if s.silo, err = cluster.NewSilo(cfg, reg); err != nil {
		t.Fatal(err)
	}
	if err := s.silo.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.silo.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if s.sdk, err = client.Dial(t.Context(), []string{s.silo.GatewayAddr()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.sdk.Close() })
	return s
}

type gateAgent struct {
	wait func(context.Context, *grain.Message) (*grain.Message, error)
}

func (g gateAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return g.wait(ctx, m)
}

// hold makes the waits that begin from now on hold until open.
func (s *conversationSilo) hold() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// open lets the waits return.
func (s *conversationSilo) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gate:
	default:
		close(s.gate)
	}
}

// cli runs the client program against the silo's gateway.
func (s *conversationSilo) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.bin, append([]string{"--addr", s.silo.GatewayAddr()}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("client %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// conversation runs `client conversation agent` in text and in JSON: the
// text, and the JSON decoded into llm.Conversation.
func (s *conversationSilo) conversation(t *testing.T, agent string) (string, llm.Conversation) {
	t.Helper()
	text, stderr, code := s.cli(t, "conversation", agent)
	if code != 0 || stderr != "" {
		t.Fatalf("client conversation %s: exit %d, stderr %q", agent, code, stderr)
	}
	out, stderr, code := s.cli(t, "-o", "json", "conversation", agent)
	if code != 0 || stderr != "" {
		t.Fatalf("client -o json conversation %s: exit %d, stderr %q", agent, code, stderr)
	}
	var rec llm.Conversation
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&rec); err != nil {
		t.Fatalf("client -o json conversation %s: %v\n%s", agent, err, out)
	}
	return text, rec
}

func wantLines(t *testing.T, what, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l) {
			t.Errorf("%s lacks %q:\n%s", what, l, text)
		}
	}
}

// TestConversationCLI: `client conversation` against a silo whose model
// agents run on a fake model: a finished conversation with its tokens;
// then, while a turn waits for its tool, the running turn with its tool
// call, and after the tool returns the finished turn with the tokens of
// both model calls. `-o json` decodes into llm.Conversation.
func TestConversationCLI(t *testing.T) {
	s := startConversationSilo(t)

	t.Run("finished", func(t *testing.T) {
		r, err := s.sdk.Ask(t.Context(), "Model:m", &client.Message{Message: "hi"})
		if err != nil || r.Message != "hello there" {
			t.Fatalf("ask Model:m: %v, %v", r, err)
		}
		text, rec := s.conversation(t, "Model:m")
		wantLines(t, "the conversation", text,
			"  user: hi\n", "  model: hello there\n", "1 model call, tokens 7 in, 3 out, answered\n", "total: 1 turns ended, tokens 7 in, 3 out\n")
		if rec.Current != nil || len(rec.Turns) != 1 || len(rec.Messages) != 2 || rec.Usage != (llm.Usage{InputTokens: 7, OutputTokens: 3}) {
			t.Fatalf("the record: %+v", rec)
		}
		sdk, err := client.AskTyped[struct{}, llm.Conversation](t.Context(), s.sdk, "Model:m", llm.SkillConversation, struct{}{})
		if err != nil || !slices.EqualFunc(sdk.Messages, rec.Messages, func(a, b llm.Message) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Fatalf("the SDK's record %+v, %v; the CLI's %+v", sdk, err, rec)
		}
	})

	// The conversation skill runs beside the turn (it interleaves), so a
	// read shows the turn in progress.
	t.Run("running", func(t *testing.T) {
		info, _ := s.silo.Runtime().Registry().Info("Model")
		i := slices.IndexFunc(info.Skills, func(sk grain.Skill) bool { return sk.Name == llm.SkillConversation })
		if i < 0 || !info.Skills[i].Interleave {
			t.Fatalf("the conversation skill of a model type does not interleave: %+v", info.Skills)
		}
		s.runningTurn(t, "Model:busy")
	})
}

// runningTurn starts a turn of agent that calls Gate's wait, reads the
// conversation while the tool holds the turn, opens the gate and reads it
// again once the turn answered.
func (s *conversationSilo) runningTurn(t *testing.T, agent string) {
	t.Helper()
	s.hold()
	answered := make(chan error, 1)
	go func() {
		r, err := s.sdk.Ask(testutil.WaitContext(t), agent, &client.Message{Message: "add it up"})
		if err == nil && r.Message != "all done" {
			err = fmt.Errorf("reply %q", r.Message)
		}
		answered <- err
	}()
	select {
	case step := <-s.entered:
		if step != "one" {
			t.Fatalf("wait of step %q", step)
		}
	case err := <-answered:
		t.Fatalf("ask %s: %v before the tool ran", agent, err)
	case <-testutil.WaitContext(t).Done():
		t.Fatal("the tool did not run")
	}

	text, rec := s.conversation(t, agent)
	wantLines(t, "the running conversation", text,
		" running since ", "1 model call, tokens 100 in, 20 out so far\n",
		"  user: add it up\n",
		`  model calls Gate_wait {"agent": "g", "input": {"step": "one"}} [w1]`+"\n",
		"  tool Gate_wait [w1]: (running)\n",
		"total: 0 turns ended, tokens 100 in, 20 out\n")
	if rec.Current == nil || rec.Current.Rounds != 1 || len(rec.Turns) != 0 || len(rec.Messages) != 2 || rec.Messages[1].ToolCalls[0].Name != "Gate_wait" {
		t.Fatalf("the running record: %+v", rec)
	}

	s.open()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("ask %s: %v", agent, err)
		}
	case <-testutil.WaitContext(t).Done():
		t.Fatal("the turn did not end")
	}
	text, rec = s.conversation(t, agent)
	wantLines(t, "the finished conversation", text,
		"2 model calls, tokens 250 in, 50 out, answered\n",
		`  tool Gate_wait [w1]: "step one waited"`+"\n",
		"  model: all done\n",
		"total: 1 turns ended, tokens 250 in, 50 out\n")
	if strings.Contains(text, "running") {
		t.Errorf("the finished conversation says running:\n%s", text)
	}
	if rec.Current != nil || len(rec.Turns) != 1 || rec.Turns[0].Rounds != 2 || rec.Usage != (llm.Usage{InputTokens: 250, OutputTokens: 50}) {
		t.Fatalf("the finished record: %+v", rec)
	}
}
