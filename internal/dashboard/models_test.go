package dashboard_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/browsertest"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// The script put in what the user says and the model answers: run, it
// would set window.__xss.
const xss = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">"'&`

// model is the fake model: "add it up" calls Gate's wait (100 tokens in,
// 20 out) and its result gets "all done" (150, 30); a prompt with script
// is answered with it (11, 5); anything else gets "hello there" (7, 3).
func model(r fakemodel.Request) fakemodel.Step {
	last := r.LastMessage()
	switch {
	case last.Role == "tool":
		return fakemodel.Step{Text: "all done", InputTokens: 150, OutputTokens: 30}
	case last.Data == "add it up":
		return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "w1", Name: "Gate_wait", Arguments: `{"agent": "g", "input": {"step": "one"}}`}}, InputTokens: 100, OutputTokens: 20}
	case strings.Contains(last.Data, "<script>"):
		return fakemodel.Step{Text: "you said " + last.Data, InputTokens: 11, OutputTokens: 5}
	}
	return fakemodel.Step{Text: "hello there", InputTokens: 7, OutputTokens: 3}
}

func apiKey(name string, groups ...string) (string, auth.APIKey) {
	k := name + "-key-0123456789"
	sum := sha256.Sum256([]byte(k))
	return k, auth.APIKey{SHA256: hex.EncodeToString(sum[:]), Principal: name, Groups: groups}
}

// TestModelPages runs a silo in this process (real etcd, gateway and
// HTTP port, API keys) with two model agent types on the fake model:
// Helper, registered in code, whose tool Gate holds a turn until the test
// lets it go, and Planner, declared with the TypeAdmin service. alice
// reads her model agents in a browser: the models page (types, active
// agents, tokens from their records and from the silo's metrics) and a
// model agent's conversation, with a turn in progress marked running,
// then finished (the page's poll shows it). Script in what the user said
// and what the model answered shows as text. bob, who may read alice's
// agents, sees her conversation; carol, who may not, is refused it and
// does not see her agents.
func TestModelPages(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	aliceKey, aliceAPI := apiKey("alice")
	bobKey, bobAPI := apiKey("bob")
	carolKey, carolAPI := apiKey("carol")
	rootKey, rootAPI := apiKey("root", "admins")
	ctx := t.Context()

	srv := fakemodel.NewFunc(model)
	t.Cleanup(srv.Close)
	var (
		mu      sync.Mutex
		gate    = make(chan struct{})
		entered = make(chan struct{}, 1)
	)
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
	t.Cleanup(release) // a test that failed holding the gate lets the turn end

	reg := grain.NewRegistry()
	type waitIn struct {
		Step string `json:"step"`
	}
	wait := grain.TypedHandler(func(ctx context.Context, in waitIn) (string, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
			return "step " + in.Step + " waited", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	must(t, reg.Register("Gate", func(grain.Host) (grain.Agent, error) { return gateAgent{wait}, nil },
		grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[waitIn, string]("wait", "Waits for the gate.")}}))
	must(t, llm.Register(reg, llm.Definition{
		Type:        "Helper",
		Description: "Adds numbers.",
		Model:       llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-model", APIKeyEnv: "FAKE_MODEL_KEY"},
		Tools:       []llm.ToolRef{{Agent: "Gate"}},
	}, llm.WithGetenv(func(name string) (string, bool) { return "test-key", name == "FAKE_MODEL_KEY" }), llm.WithMaxRetries(0)))

	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "m0"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/models/"}
	cfg.Logger = testutil.Logger()
	cfg.Gateway.Auth.Keys = []auth.APIKey{aliceAPI, bobAPI, carolAPI, rootAPI}
	cfg.LLM.AllowPrivateNetworks = true // the fake model is on loopback
	s, err := cluster.NewSilo(cfg, reg)
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { s.Close(context.Background()) })
	base := "http://" + s.HTTPAddr()
	dial := func(k string) *client.Client {
		c, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithAPIKey(k))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	root, alice := dial(rootKey), dial(aliceKey)
	_, err = root.ACL().AddRule(ctx, client.ACLRule{OwnerPattern: "alice", AgentPattern: "*", CallerPattern: "bob", Permission: "Read"})
	must(t, err)
	_, err = root.Admin().ApplyType(ctx, fmt.Appendf(nil, "type: Planner\ndescription: Plans.\nmodel:\n  provider: openai\n  base_url: %s\n  name: fake-model\n", srv.OpenAIURL()))
	must(t, err)

	// alice's conversations: Helper:alice:h1 answers once, then holds a
	// turn in its tool; Planner:alice:p1 answers once.
	ask := func(to, text string) string {
		t.Helper()
		m, err := alice.Ask(ctx, to, &client.Message{Message: text})
		must(t, err)
		return m.Message
	}
	if got := ask("Helper:alice:h1", "hello"); got != "hello there" {
		t.Fatalf("h1 answered %q", got)
	}
	if got := ask("Planner:alice:p1", "hello"); got != "hello there" {
		t.Fatalf("p1 answered %q", got)
	}
	held := make(chan error, 1)
	go func() {
		m, err := alice.Ask(ctx, "Helper:alice:h1", &client.Message{Message: "add it up"})
		if err == nil && m.Message != "all done" {
			err = fmt.Errorf("answered %q", m.Message)
		}
		held <- err
	}()
	t.Cleanup(func() { release(); <-held })
	<-entered // the turn waits in its tool call

	// The browser, as alice.
	b, stop := browsertest.New(t, ctx, chromium, 1200, 900)
	defer stop()
	shots := os.Getenv("DASHBOARD_SCREENSHOTS")
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		var shot []byte
		b.RunT("screenshot "+name, func(ctx context.Context) (err error) {
			shot, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		})
		img, err := png.Decode(bytes.NewReader(shot))
		must(t, err)
		var out bytes.Buffer
		must(t, (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img))
		must(t, os.WriteFile(filepath.Join(shots, name+".png"), out.Bytes(), 0o644))
	}
	waitText := func(sel, want string) {
		t.Helper()
		b.RunT("wait for "+sel+" to say "+want, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector(%q)||{}).innerText?.includes(%q)`, sel, want), chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}
	contains := func(where, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q:\n%s", where, w, got)
			}
		}
	}
	b.Run("log in", chromedp.Navigate(base+"/ui/models"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), aliceKey), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("model-types")))

	// The models page: both types (Gate is none), h1 in a turn, the
	// tokens of its record so far (7+100 in, 3+20 out), and this silo's
	// metrics of Planner, the declared type that counts in them.
	types := b.Text("#model-types")
	contains("the model types", types, "Helper", "Adds numbers.", "Planner", "declared", "Plans.")
	if strings.Contains(types, "Gate") {
		t.Errorf("Gate listed as a model type:\n%s", types)
	}
	for _, row := range strings.Split(types, "\n") {
		f := strings.Fields(row)
		switch {
		case strings.HasPrefix(row, "Helper"):
			// agents, in a turn, tokens in, out, this silo's calls, in, out
			if want := "1 1 107 23 0 0 0"; strings.Join(f[len(f)-7:], " ") != want {
				t.Errorf("Helper's row %q, want it to end %q", row, want)
			}
		case strings.HasPrefix(row, "Planner"):
			if want := "1 0 7 3 1 7 3"; strings.Join(f[len(f)-7:], " ") != want {
				t.Errorf("Planner's row %q, want it to end %q", row, want)
			}
		}
	}
	agents := b.Text("#model-agents")
	contains("the model agents", agents, "Helper:alice:h1", "in a turn", "Planner:alice:p1", "idle")
	contains("the total", b.Text("#model-total"), "2 active model agents")
	shot("models")

	// h1's page, from its link: the first turn answered, the second
	// running in its tool call.
	b.Run("open h1", chromedp.Click(chromedp.CSS(`#model-agents a[href*="Helper"][href*="h1"]`)), chromedp.WaitVisible(chromedp.ID("turns")))
	turns := b.Text("#turns")
	contains("h1's turns", turns, "hello", "hello there", "tokens 7 in, 3 out", "answered",
		"add it up", "Gate_wait", `{"agent": "g", "input": {"step": "one"}}`, "[w1] running", "running", "tokens 100 in, 20 out so far")
	contains("h1's totals", b.Text("#turn-count"), "1 ended, one running")
	contains("h1's tokens", b.Text("#total-tokens"), "107 in, 23 out")
	shot("model")

	// The turn ends; the page's poll shows it.
	release()
	if err := <-held; err != nil {
		t.Fatalf("the held turn: %v", err)
	}
	held <- nil // for the cleanup
	waitText("#turns", "all done")
	turns = b.Text("#turns")
	contains("h1's finished turns", turns, "step one waited", "tokens 250 in, 50 out")
	if strings.Contains(turns, "running") {
		t.Errorf("a turn still running:\n%s", turns)
	}
	conv, err := client.AskTyped[struct{}, llm.Conversation](ctx, alice, "Helper:alice:h1", llm.SkillConversation, struct{}{})
	must(t, err)
	contains("h1's totals", b.Text("#total-tokens"), fmt.Sprintf("%d in, %d out", conv.Usage.InputTokens, conv.Usage.OutputTokens))
	contains("h1's turn count", b.Text("#turn-count"), fmt.Sprintf("%d ended", len(conv.Turns)))

	// Script said and answered shows as text and does not run.
	if got := ask("Helper:alice:h1", xss); got != "you said "+xss {
		t.Fatalf("h1 answered %q", got)
	}
	b.Run("reload h1", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("turns")))
	contains("h1's turns with script", b.Text("#turns"), xss, "you said "+xss, "tokens 11 in, 5 out")
	var ran any
	b.RunT("read window.__xss", func(ctx context.Context) (err error) {
		ran, err = chromedp.Run(ctx, chromedp.Evaluate[any](`window.__xss === undefined ? null : window.__xss`))
		return err
	})
	if ran != nil {
		t.Fatalf("the script ran: window.__xss = %v", ran)
	}
	shot("model-ended")

	// The agent page links a model agent's conversation, not another's.
	b.Run("open h1's agent page", chromedp.Navigate(base+"/ui/agent?addr=Helper:alice:h1"), chromedp.WaitVisible(chromedp.ID("conversation")))
	b.Run("open g's agent page", chromedp.Navigate(base+"/ui/agent?addr=Gate:alice:g"), chromedp.WaitVisible(chromedp.ID("config")))
	if n := b.Eval(`document.querySelectorAll("#conversation").length`, false); n != float64(0) {
		t.Errorf("Gate:alice:g links a conversation (%v)", n)
	}
	stop()

	// alice's own address without the owner; Gate is no model agent.
	aliceHTTP := login(t, base, aliceKey)
	contains("Helper:h1", aliceHTTP("/ui/model?addr=Helper:h1"), `<h2 id="address">Helper:alice:h1</h2>`, "all done")
	contains("Gate:alice:g", aliceHTTP("/ui/model?addr=Gate:alice:g"), "InvalidArgument", "not a model agent")

	// bob may read alice's agents: her conversation and her model agents.
	bob := login(t, base, bobKey)
	contains("bob's view of h1", bob("/ui/model?addr=Helper:alice:h1"), "all done", "step one waited", "you said &lt;script&gt;")
	contains("bob's models page", bob("/ui/models"), "Helper:alice:h1", "Planner:alice:p1")

	// carol may not: refused by the gateway, and her models page lists
	// the types but not alice's agents.
	carol := login(t, base, carolKey)
	page := carol("/ui/model?addr=Helper:alice:h1")
	contains("carol's view of h1", page, "PermissionDenied")
	if strings.Contains(page, "hello there") || strings.Contains(page, "add it up") {
		t.Errorf("carol sees alice's conversation:\n%s", page)
	}
	page = carol("/ui/models")
	contains("carol's models page", page, "Helper", "0 active model agents")
	if strings.Contains(page, "Helper:alice") {
		t.Errorf("carol's models page lists alice's agents:\n%s", page)
	}
}

// login logs in with key over plain HTTP and returns a function that
// gets a page's HTML.
func login(t *testing.T, base, key string) func(path string) string {
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm(base+"/ui/login", url.Values{"key": {key}})
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	return func(path string) string {
		t.Helper()
		resp, err := hc.Get(base + path)
		must(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		must(t, err)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
}

type gateAgent struct {
	wait func(context.Context, *grain.Message) (*grain.Message, error)
}

func (g gateAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return g.wait(ctx, m)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
