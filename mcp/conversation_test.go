package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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

// A model agent's ask tool takes "session": the official MCP client's
// sessions that ask for it each have a conversation of their own, which
// goes on within the session; a call without it has the agent's own.
func TestModelAgentSessionConversations(t *testing.T) {
	e := etcdtest.Start(t)
	// The model answers with the user's messages it was sent.
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
	reg := grain.NewRegistry()
	def, err := llm.ParseDefinition(fmt.Appendf(nil, "type: Chat\nmodel: {provider: openai, base_url: %s, name: fake-1}\n", srv.OpenAIURL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := llm.Register(reg, def, llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.MCP.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/mcp-sessions/"}
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
	connect := func() *mcpsdk.ClientSession {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentsilo-test", Version: "1"}, nil).Connect(t.Context(), &mcpsdk.StreamableClientTransport{
			Endpoint:   "http://" + s.MCPAddr() + "/mcp/Chat/dev/main",
			HTTPClient: &http.Client{Transport: headers{base: tr, h: dev}},
			MaxRetries: -1,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ask := func(cs *mcpsdk.ClientSession, say string, session bool) string {
		t.Helper()
		args := map[string]any{"message": say}
		if session {
			args["session"] = true
		}
		res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "ask", Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("ask %q: %+v %v", say, res, err)
		}
		return strings.Join(texts(res), "\n")
	}
	one, two := connect(), connect()
	tools, err := one.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "ask" && !strings.Contains(fmt.Sprint(tl.InputSchema), "session") {
			t.Errorf("the ask tool's schema does not offer session: %v", tl.InputSchema)
		}
	}
	if got := ask(one, "a", true); got != "a" {
		t.Fatalf("session one's first turn saw %q", got)
	}
	if got := ask(two, "b", true); got != "b" {
		t.Fatalf("session two's first turn saw %q, want a conversation of its own", got)
	}
	if got := ask(one, "c", true); got != "a | c" {
		t.Fatalf("session one's second turn saw %q, want its conversation continued", got)
	}
	if got := ask(two, "d", false); got != "d" {
		t.Fatalf("a turn without session saw %q, want the agent's own conversation", got)
	}
	if got := ask(one, "e", false); got != "d | e" {
		t.Fatalf("the agent's own conversation saw %q", got)
	}
	if _, err := one.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "ask", Arguments: map[string]any{"message": "x", "session": "yes"}}); err == nil {
		t.Fatal("session given as a string was accepted")
	}
}
