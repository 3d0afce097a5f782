package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

type tallyIn struct {
	N int `json:"n"`
}

type tallyOut struct {
	Total int64 `json:"total"`
}

type tallier func(context.Context, *grain.Message) (*grain.Message, error)

func (f tallier) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// startCareful starts a silo serving MCP with the model type Careful,
// whose tool Adder_add (adding to the returned total) needs approval; its
// fake model calls the tool once, then answers "done: <result>".
func startCareful(t *testing.T) (*cluster.Silo, *atomic.Int64) {
	t.Helper()
	e := etcdtest.Start(t)
	srv := llmtest.NewFunc(llmtest.Loop{Tool: "Adder_add", Arguments: `{"agent": "x", "input": {"n": 1}}`}.Respond)
	t.Cleanup(srv.Close)
	total := new(atomic.Int64)
	reg := grain.NewRegistry()
	err := reg.Register("Adder", func(grain.Host) (grain.Agent, error) {
		return tallier(grain.TypedHandler(func(_ context.Context, in tallyIn) (tallyOut, error) {
			return tallyOut{Total: total.Add(int64(in.N))}, nil
		})), nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[tallyIn, tallyOut]("add", "Add n.")}})
	if err != nil {
		t.Fatal(err)
	}
	def, err := llm.ParseDefinition(fmt.Appendf(nil, `type: Careful
model: {provider: openai, base_url: %s, name: fake-1}
tools: [{agent: Adder}]
approval: [Adder_add]
`, srv.OpenAIURL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := llm.Register(reg, def, llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.MCP.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/mcp-approval/"}
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
	return s, total
}

// A model agent's tool call that needs approval, asked through MCP: a
// client that takes elicitation is asked (elicitation/create) to approve
// it, and its answer decides (accepted: the call runs; declined: denied);
// a client that takes none gets a result saying which approval waits.
func TestApprovalByElicitation(t *testing.T) {
	s, total := startCareful(t)
	session := func(elicit func(*mcpsdk.ElicitRequest) *mcpsdk.ElicitResult) *mcpsdk.ClientSession {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		opts := &mcpsdk.ClientOptions{}
		if elicit != nil {
			opts.ElicitationHandler = func(_ context.Context, r *mcpsdk.ElicitRequest) (*mcpsdk.ElicitResult, error) { return elicit(r), nil }
		}
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentsilo-test", Version: "1"}, opts).Connect(t.Context(), &mcpsdk.StreamableClientTransport{
			Endpoint:   "http://" + s.MCPAddr() + "/mcp",
			HTTPClient: &http.Client{Transport: headers{base: tr, h: dev}},
			MaxRetries: -1,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ask := func(cs *mcpsdk.ClientSession, alias string) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Careful_ask", Arguments: map[string]any{"agent": "dev:" + alias, "message": "add one"}})
		if err != nil || res.IsError {
			t.Fatalf("Careful_ask: %+v %v", res, err)
		}
		return strings.Join(texts(res), "\n")
	}

	var asked atomic.Value
	yes := session(func(r *mcpsdk.ElicitRequest) *mcpsdk.ElicitResult {
		asked.Store(r.Params.Message)
		return &mcpsdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	})
	if got := ask(yes, "c1"); got != `done: {"total":1}` || total.Load() != 1 {
		t.Fatalf("accepted: %q, total %d", got, total.Load())
	}
	if m, _ := asked.Load().(string); !strings.Contains(m, "Adder_add") || !strings.Contains(m, "waits for approval") {
		t.Fatalf("the elicitation's message: %q", m)
	}
	no := session(func(*mcpsdk.ElicitRequest) *mcpsdk.ElicitResult { return &mcpsdk.ElicitResult{Action: "decline"} })
	if got := ask(no, "c2"); !strings.Contains(got, "denied by dev: the MCP client declined") || total.Load() != 1 {
		t.Fatalf("declined: %q, total %d", got, total.Load())
	}
	plain := session(nil)
	if got := ask(plain, "c3"); !strings.Contains(got, "waits for approval, id Careful:dev:c3/") || total.Load() != 1 {
		t.Fatalf("no elicitation: %q, total %d", got, total.Load())
	}
}

// The official TypeScript SDK's elicitation support answers the approval
// of a model agent's tool call: accepted, the call runs; declined, it is
// denied (tests/mcpjs/elicit.mjs).
func TestJSElicitation(t *testing.T) {
	dir := jsDir(t)
	s, total := startCareful(t)
	cmd := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "elicit.mjs"), "http://"+s.MCPAddr()+"/mcp")
	out, err := cmd.CombinedOutput()
	t.Logf("node elicit.mjs:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\nall ok") {
		t.Fatalf("the TypeScript client: %v", err)
	}
	if total.Load() != 1 {
		t.Fatalf("Adder's total %d after one approval and one denial, want 1", total.Load())
	}
}
