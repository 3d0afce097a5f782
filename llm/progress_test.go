package llm_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// progressSilo starts a silo serving A2A and MCP with the model type
// Helper on srv, streaming, whose tool is the working memory.
func progressSilo(t *testing.T, srv *fakemodel.Server) *cluster.Silo {
	t.Helper()
	e := etcdtest.Start(t)
	t.Cleanup(e.Stop)
	reg := grain.NewRegistry()
	def := llm.Definition{
		Type:  "Helper",
		Model: llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-1"},
		Tools: []llm.ToolRef{{Memory: true}},
	}
	if err := llm.Register(reg, def, llm.WithStreaming(true), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/progress/"}
	cfg.Logger = testutil.Logger()
	cfg.A2A.Addr, cfg.MCP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	s, err := cluster.NewSilo(cfg, reg)
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
	return s
}

// progressScript is a turn that calls a tool, then streams an answer of
// two lines.
func progressScript() *fakemodel.Server {
	return fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "c1", Name: "memory_put", Arguments: `{"key": "order", "text": "order 7"}`}}},
		fakemodel.Step{Text: "Noted: order 7.\nAnything else?"},
	)
}

// principal adds the declared principal to a client's requests.
type principal struct{ base http.RoundTripper }

func (p principal) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("x-agentsilo-principal", "alice")
	return p.base.RoundTrip(r)
}

func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: principal{tr}}
}

// An A2A caller streaming a message to a model agent (message/stream,
// with the official a2a-go client) sees the turn's steps and the model's
// text as it streams, as working status updates, before the answer's
// artifact and the completed state.
func TestProgressA2A(t *testing.T) {
	srv := progressScript()
	defer srv.Close()
	s := progressSilo(t, srv)
	hc := httpClient(t)
	card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.A2AAddr(), agentcard.WithPath("/a2a/Helper/alice/h/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()

	var seq []string // "status:<text>", "artifact:<text>", "final:<state>"
	var streamed strings.Builder
	req := &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("remember order 7"))}
	for ev, err := range c.SendStreamingMessage(t.Context(), req) {
		if err != nil {
			t.Fatal(err)
		}
		switch v := ev.(type) {
		case *spec.TaskStatusUpdateEvent:
			if v.Status.Message == nil {
				seq = append(seq, "state:"+string(v.Status.State))
				continue
			}
			text := partsText(v.Status.Message.Parts)
			// The push's state, in the metadata agentsilo.state (see
			// docs/a2a.md), names its kind.
			st, _ := v.Status.Message.Metadata["agentsilo.state"].(map[string]any)
			if st[llm.StateProgress] == llm.ProgressDelta {
				streamed.WriteString(text)
				seq = append(seq, "delta")
				continue
			}
			seq = append(seq, "status:"+text)
		case *spec.TaskArtifactUpdateEvent:
			seq = append(seq, "artifact:"+partsText(v.Artifact.Parts))
		}
	}
	got := strings.Join(seq, " | ")
	step := strings.Index(got, "status:round 1: asking fake-1")
	tool := strings.Index(got, "status:calling memory_put")
	delta := strings.Index(got, "delta")
	answer := strings.Index(got, "artifact:Noted: order 7.\nAnything else?")
	if step < 0 || tool < step || delta < tool || answer < delta || !strings.HasSuffix(got, "state:"+string(spec.TaskStateCompleted)) {
		t.Fatalf("events: %s", got)
	}
	if streamed.String() != "Noted: order 7.\nAnything else?" {
		t.Errorf("streamed text %q", streamed.String())
	}
}

// An MCP caller of a model agent's ask tool (the official Go SDK's
// client, with a progress handler and a progress token) gets the turn's
// steps and streamed text as progress notifications before the result.
func TestProgressMCP(t *testing.T) {
	srv := progressScript()
	defer srv.Close()
	s := progressSilo(t, srv)
	var mu sync.Mutex
	var notes []string
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "progress-test", Version: "1"}, &mcpsdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
			mu.Lock()
			notes = append(notes, req.Params.Message)
			mu.Unlock()
		},
	})
	cs, err := c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{
		Endpoint:             "http://" + s.MCPAddr() + "/mcp/Helper/alice/h",
		HTTPClient:           httpClient(t),
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tl *mcpsdk.Tool) bool { return tl.Name == skillAsk }) {
		t.Skipf("the model type offers no %q skill, the text turn as an MCP tool (llm/agent.go)", skillAsk)
	}
	params := &mcpsdk.CallToolParams{Name: skillAsk, Arguments: map[string]any{"message": "remember order 7"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcpsdk.TextContent).Text != "Noted: order 7.\nAnything else?" {
		t.Fatalf("result: %+v", res)
	}
	// The client hands notifications to its handler on a goroutine of its
	// own: the last may come in after the result.
	all := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(notes, " | ")
	}
	testutil.WaitFor(t, "the turn's progress notifications", func() bool { return strings.Contains(all(), "Anything else?") })
	got := all()
	step, tool, text := strings.Index(got, "round 1: asking fake-1"), strings.Index(got, "calling memory_put"), strings.Index(got, "Noted: order 7.")
	if step < 0 || tool < step || text < tool {
		t.Fatalf("progress notifications: %s", got)
	}
}

// skillAsk is the model type's skill that asks it with text, its turn.
const skillAsk = "ask"

func partsText(parts []*spec.Part) string {
	var b strings.Builder
	for _, p := range parts {
		if t, ok := p.Content.(spec.Text); ok {
			b.WriteString(string(t))
		}
	}
	return b.String()
}
