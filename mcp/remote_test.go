package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp"
)

// remoteServer is an MCP server made with the Go SDK on 127.0.0.1, with
// tools that answer in text, in structured content and with isError, and
// one that waits until its call is cancelled. It records what its
// requests carry.
type remoteServer struct {
	addr      string
	srv       *http.Server
	done      chan struct{}
	cancelled atomic.Int32 // calls of "wait" that saw their cancellation
	started   chan struct{}
	inits     atomic.Int32 // sessions begun (initialize)
	h         atomic.Pointer[http.Handler]
	// forget makes the server forget its sessions, as a restart does.
	forget func()
	// closeSessions ends the server's sessions.
	closeSessions func()

	mu      sync.Mutex
	headers []http.Header // of every POST
}

type addIn struct {
	A int `json:"a" jsonschema:"the first number"`
	B int `json:"b" jsonschema:"the second number"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// startRemoteServer serves on addr ("127.0.0.1:0" for a free port).
func startRemoteServer(t testing.TB, addr string) *remoteServer {
	t.Helper()
	rs := &remoteServer{done: make(chan struct{}), started: make(chan struct{}, 10)}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "test-tools", Version: "1"}, nil)
	s.AddTool(&mcpsdk.Tool{Name: "greet", Description: "Greets someone.\nSecond line.", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(_ context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			var in struct{ Name string }
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "hello " + in.Name}, &mcpsdk.TextContent{Text: "bye"}}}, nil
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "add", Description: "Adds two numbers."},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in addIn) (*mcpsdk.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	s.AddTool(&mcpsdk.Tool{Name: "fail", Description: "Always fails.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "the disk is full"}}}, nil
		})
	s.AddTool(&mcpsdk.Tool{Name: "wait", Description: "Waits until cancelled.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			rs.started <- struct{}{}
			select {
			case <-ctx.Done():
				rs.cancelled.Add(1)
				return nil, ctx.Err()
			case <-rs.done:
				return &mcpsdk.CallToolResult{}, nil
			}
		})
	rs.closeSessions = func() {
		for ss := range s.Sessions() {
			ss.Close()
		}
	}
	rs.forget = func() {
		rs.closeSessions()
		var h http.Handler = mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, nil)
		rs.h.Store(&h)
	}
	rs.forget()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rs.addr = lis.Addr().String()
	rs.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			rs.mu.Lock()
			rs.headers = append(rs.headers, r.Header.Clone())
			rs.mu.Unlock()
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte(`"method":"initialize"`)) {
				rs.inits.Add(1)
			}
		}
		(*rs.h.Load()).ServeHTTP(w, r)
	})}
	go rs.srv.Serve(lis)
	t.Cleanup(rs.close)
	return rs
}

// close stops the server (and any call waiting in it).
func (rs *remoteServer) close() {
	select {
	case <-rs.done:
		return
	default:
	}
	close(rs.done)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs.srv.Shutdown(ctx)
	rs.closeSessions()
}

func (rs *remoteServer) url() string { return "http://" + rs.addr + "/mcp" }

// lastHeaders are the headers of the last POST.
func (rs *remoteServer) lastHeaders() http.Header {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.headers) == 0 {
		return nil
	}
	return rs.headers[len(rs.headers)-1]
}

// remoteRuntime starts a runtime with the MCP agent type registered with
// opts, and closes it at the test's end.
func remoteRuntime(t testing.TB, opts mcp.RemoteOptions) *grain.Runtime {
	t.Helper()
	reg := grain.NewRegistry()
	if err := mcp.RegisterRemote(reg, opts); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = testutil.Logger()
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return rt
}

// remoteAsk asks agent for messageType with data.
func remoteAsk(ctx context.Context, rt *grain.Runtime, agent, messageType, data string) (*grain.Message, error) {
	m := &grain.Message{To: agent, From: "Session:system:test", MessageType: messageType}
	if data != "" {
		m.Data, m.DataType = []byte(data), grain.JSONType
	}
	return rt.Ask(ctx, m)
}

func TestRemoteMCPServer(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	rt := remoteRuntime(t, mcp.RemoteOptions{AllowPrivateNetworks: true})
	const agent = "MCP:system:tools"
	if _, err := rt.CreateAgent(t.Context(), "system", agent, map[string]string{
		mcp.RemoteURL: srv.url(), mcp.RemoteAPIKey: "k3y", mcp.RemoteHeaderPrefix + "X-Tenant": "acme",
	}); err != nil {
		t.Fatal(err)
	}

	// tools/list: JSON data with the schemas, and a line per tool.
	r, err := remoteAsk(t.Context(), rt, agent, mcp.RemoteListTools, "")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Data, &list); err != nil || r.DataType != grain.JSONType {
		t.Fatalf("tools/list %+v: %v", r, err)
	}
	byName := map[string]int{}
	for i, tl := range list.Tools {
		byName[tl.Name] = i
	}
	if len(list.Tools) != 4 || !strings.Contains(string(list.Tools[byName["add"]].InputSchema), `"the first number"`) ||
		!strings.Contains(string(list.Tools[byName["add"]].OutputSchema), `"sum"`) {
		t.Fatalf("tools: %s", r.Data)
	}
	if !strings.Contains(r.Message, "greet: Greets someone.") || strings.Contains(r.Message, "Second line") {
		t.Errorf("tools/list text %q", r.Message)
	}
	if h := srv.lastHeaders(); h.Get("X-Api-Key") != "k3y" || h.Get("X-Tenant") != "acme" {
		t.Errorf("the server got x-api-key %q, x-tenant %q", h.Get("X-Api-Key"), h.Get("X-Tenant"))
	}

	// A call by the tool's name: text content as the message.
	r, err = remoteAsk(t.Context(), rt, agent, "greet", `{"name":"Ada"}`)
	if err != nil || r.Message != "hello Ada\nbye" || len(r.Data) != 0 {
		t.Fatalf("greet: %v, %v", r, err)
	}
	// tools/call: structured content as JSON data.
	r, err = remoteAsk(t.Context(), rt, agent, mcp.RemoteCallTool, `{"name":"add","arguments":{"a":2,"b":40}}`)
	if err != nil || r.DataType != grain.JSONType || string(r.Data) != `{"sum":42}` {
		t.Fatalf("add: %v, %v", r, err)
	}
	// isError: the Ask fails with the tool's text.
	if _, err := remoteAsk(t.Context(), rt, agent, "fail", ""); errs.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "the disk is full") {
		t.Fatalf("fail: %v, want Unknown with the tool's text", err)
	}
	// Refusals of the server and of the agent.
	for _, tc := range []struct {
		mt, data string
		code     codes.Code
	}{
		{"add", `{"a":"two"}`, codes.Unknown},                           // the server's schema check: an isError result
		{"nosuchtool", `{}`, codes.InvalidArgument},                     // the server knows no such tool
		{"add", `[1,2]`, codes.InvalidArgument},                         // arguments must be an object
		{mcp.RemoteCallTool, `{"arguments":{}}`, codes.InvalidArgument}, // no name
		{"", `{}`, codes.InvalidArgument},
	} {
		if _, err := remoteAsk(t.Context(), rt, agent, tc.mt, tc.data); errs.Code(err) != tc.code {
			t.Errorf("%q %s: %v, want %v", tc.mt, tc.data, err, tc.code)
		}
	}
	// An agent asks it, as agents do: the Planner's turn calls the tool.
	if err := rt.Registry().Register("Planner", func(h grain.Host) (grain.Agent, error) {
		return remoteAgentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			sum, err := h.Ask(ctx, agent, &grain.Message{MessageType: "add", DataType: grain.JSONType, Data: []byte(`{"a":20,"b":22}`)})
			if err != nil {
				return nil, err
			}
			r := m.Response()
			r.Message = "the tool says " + string(sum.Data)
			return r, nil
		}), nil
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := rt.Ask(t.Context(), &grain.Message{To: "Planner:system:p", From: "Session:system:test"}); err != nil || r.Message != `the tool says {"sum":42}` {
		t.Fatalf("an agent asking the MCP agent: %v, %v", r, err)
	}

	// The session survived all of that: one session for the activation.
	if n := srv.inits.Load(); n != 1 {
		t.Errorf("%d sessions begun, want 1", n)
	}
}

// The server restarts between two calls: the agent makes a new session and
// the call goes through.
func TestRemoteServerRestart(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	rt := remoteRuntime(t, mcp.RemoteOptions{AllowPrivateNetworks: true})
	const agent = "MCP:system:tools"
	if _, err := rt.CreateAgent(t.Context(), "system", agent, map[string]string{mcp.RemoteURL: srv.url()}); err != nil {
		t.Fatal(err)
	}
	if r, err := remoteAsk(t.Context(), rt, agent, "add", `{"a":1,"b":2}`); err != nil || string(r.Data) != `{"sum":3}` {
		t.Fatalf("before the restart: %v, %v", r, err)
	}
	srv.close()
	// While it is down: Unavailable.
	if _, err := remoteAsk(t.Context(), rt, agent, "add", `{"a":1,"b":2}`); errs.Code(err) != codes.Unavailable {
		t.Fatalf("server down: %v, want Unavailable", err)
	}
	srv2 := startRemoteServer(t, srv.addr)
	if r, err := remoteAsk(t.Context(), rt, agent, "add", `{"a":3,"b":4}`); err != nil || string(r.Data) != `{"sum":7}` {
		t.Fatalf("after the restart: %v, %v", r, err)
	}
	if n := srv2.inits.Load(); n != 1 {
		t.Errorf("the restarted server saw %d sessions begin, want 1", n)
	}

	// And a server that lost its sessions when the agent was not looking
	// (a restart between two calls): it answers 404 for the session, the
	// agent makes a new one and sends the call again.
	srv2.forget()
	if r, err := remoteAsk(t.Context(), rt, agent, "add", `{"a":5,"b":6}`); err != nil || string(r.Data) != `{"sum":11}` {
		t.Fatalf("after the server lost the session: %v, %v", r, err)
	}
	srv2.forget()
	if r, err := remoteAsk(t.Context(), rt, agent, mcp.RemoteListTools, ""); err != nil || !strings.Contains(r.Message, "add: Adds two numbers.") {
		t.Fatalf("tools/list after the server lost the session: %v, %v", r, err)
	}
	if n := srv2.inits.Load(); n != 3 {
		t.Errorf("the server saw %d sessions begin, want 3", n)
	}
}

// Cancelling the Ask cancels the tool call on the server; the caller's
// trace context reaches the server.
func TestRemoteCancelAndTrace(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	rt := remoteRuntime(t, mcp.RemoteOptions{AllowPrivateNetworks: true})
	const agent = "MCP:system:tools"
	if _, err := rt.CreateAgent(t.Context(), "system", agent, map[string]string{mcp.RemoteURL: srv.url()}); err != nil {
		t.Fatal(err)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := &grain.Message{To: agent, From: "Session:system:test", MessageType: "greet", Data: []byte(`{"name":"x"}`)}
	if _, err := rt.Ask(grain.WithTraceparent(t.Context(), tp), m); err != nil {
		t.Fatal(err)
	}
	got := srv.lastHeaders().Get("Traceparent")
	if !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Fatalf("the server got traceparent %q, want one of trace 4bf92f3577b34da6a3ce929d0e0e4736", got)
	}

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := remoteAsk(ctx, rt, agent, "wait", `{}`)
		errc <- err
	}()
	<-srv.started
	cancel()
	if err := <-errc; errs.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v, want Canceled", err)
	}
	testutil.WaitFor(t, "the server's tool sees its cancellation", func() bool { return srv.cancelled.Load() == 1 })

	// A deadline ends the call the same way.
	dctx, dcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer dcancel()
	if _, err := remoteAsk(dctx, rt, agent, "wait", `{}`); errs.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	<-srv.started
	testutil.WaitFor(t, "the server's tool sees the deadline", func() bool { return srv.cancelled.Load() == 2 })
	// The session still works.
	if _, err := remoteAsk(t.Context(), rt, agent, "greet", `{"name":"y"}`); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteConfiguration(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")

	// The SSRF guard: loopback is refused unless allowed.
	rt := remoteRuntime(t, mcp.RemoteOptions{})
	if _, err := rt.CreateAgent(t.Context(), "system", "MCP:system:local", map[string]string{mcp.RemoteURL: srv.url()}); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:local", mcp.RemoteListTools, ""); errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "AllowPrivateNetworks") {
		t.Fatalf("loopback server: %v, want PermissionDenied naming AllowPrivateNetworks", err)
	}

	// No configuration, and no Resolve: FailedPrecondition; a bad URL too.
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:none", mcp.RemoteListTools, ""); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "has no url") {
		t.Fatalf("unconfigured: %v, want FailedPrecondition", err)
	}
	if _, err := rt.CreateAgent(t.Context(), "system", "MCP:system:bad", map[string]string{mcp.RemoteURL: "ftp://x/y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:bad", mcp.RemoteListTools, ""); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ftp URL: %v, want FailedPrecondition", err)
	}

	// Resolve gives unconfigured agents their server and headers.
	var asked atomic.Value
	rt2 := remoteRuntime(t, mcp.RemoteOptions{AllowPrivateNetworks: true, Resolve: func(_ context.Context, owner, alias string) (string, map[string]string, bool, error) {
		asked.Store(owner + "/" + alias)
		switch alias {
		case "tools":
			return srv.url(), map[string]string{"Authorization": "Bearer t0ken"}, true, nil
		case "broken":
			return "", nil, false, errs.New(codes.Unavailable, "the directory is down")
		}
		return "", nil, false, nil
	}})
	if r, err := remoteAsk(t.Context(), rt2, "MCP:acme:tools", "add", `{"a":1,"b":1}`); err != nil || string(r.Data) != `{"sum":2}` {
		t.Fatalf("resolved: %v, %v", r, err)
	}
	if asked.Load() != "acme/tools" || srv.lastHeaders().Get("Authorization") != "Bearer t0ken" {
		t.Errorf("Resolve asked for %v; the server got Authorization %q", asked.Load(), srv.lastHeaders().Get("Authorization"))
	}
	if _, err := remoteAsk(t.Context(), rt2, "MCP:acme:unknown", mcp.RemoteListTools, ""); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unknown to Resolve: %v, want FailedPrecondition", err)
	}
	if _, err := remoteAsk(t.Context(), rt2, "MCP:acme:broken", mcp.RemoteListTools, ""); errs.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the directory is down") {
		t.Fatalf("Resolve failing: %v, want its Unavailable", err)
	}

	// A server that refuses the credentials: Unauthenticated.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deny := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	})}
	go deny.Serve(lis)
	defer deny.Close()
	if _, err := rt2.CreateAgent(t.Context(), "system", "MCP:system:deny", map[string]string{mcp.RemoteURL: "http://" + lis.Addr().String() + "/mcp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteAsk(t.Context(), rt2, "MCP:system:deny", mcp.RemoteListTools, ""); errs.Code(err) != codes.Unauthenticated {
		t.Fatalf("401: %v, want Unauthenticated", err)
	}
}

type quoteIn struct {
	Item string `json:"item" jsonschema:"what to price"`
	Qty  int    `json:"qty"`
}

type quoteOut struct {
	Price float64 `json:"price"`
}

// One typed skill declaration serves the Ask API, A2A and MCP with the same
// schema; and an MCP agent of a second cluster reaches it through the
// first silo's MCP endpoint.
func TestRemoteTypedSkillAcrossSilos(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "s1", "/remote1/", func(c *cluster.SiloConfig) { c.A2A.Addr = "127.0.0.1:0" })
	s2 := startSilo(t, e, "s2", "/remote2/", func(c *cluster.SiloConfig) { c.MCP.AllowPrivateNetworks = true })
	skill := grain.TypedSkill[quoteIn, quoteOut]("quote", "Prices an order.", "shop")
	var runs atomic.Int32
	shop := func(grain.Host) (grain.Agent, error) {
		return remoteAgentFunc(grain.TypedHandler(func(_ context.Context, in quoteIn) (quoteOut, error) {
			runs.Add(1)
			return quoteOut{Price: 2.5 * float64(in.Qty)}, nil
		})), nil
	}
	info := grain.TypeInfo{Description: "A shop.", Skills: []grain.Skill{skill}}
	if err := s1.Runtime().Registry().Register("Shop", shop, info); err != nil {
		t.Fatal(err)
	}

	// The Ask API: AskTyped, and the gateway's refusal of bad arguments.
	c1, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if out, err := client.AskTyped[quoteIn, quoteOut](t.Context(), c1, "Shop:dev:s", "quote", quoteIn{Item: "pen", Qty: 4}); err != nil || out.Price != 10 {
		t.Fatalf("AskTyped: %+v, %v", out, err)
	}
	if _, err := client.AskTyped[map[string]any, quoteOut](t.Context(), c1, "Shop:dev:s", "quote", map[string]any{"item": "pen"}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("AskTyped with bad arguments: %v, want InvalidArgument", err)
	}
	types, err := c1.Admin().Types(t.Context(), "shop")
	if err != nil || len(types) != 1 || types[0].Skills[0].InputSchema != string(skill.InputSchema) {
		t.Fatalf("Types: %v, %v", types, err)
	}

	// A silo of the same cluster without the type lists it with its
	// schemas, from its peer.
	s3 := startSilo(t, e, "s3", "/remote1/", nil)
	c3, err := client.Dial(t.Context(), []string{s3.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, ok := s3.Runtime().Registry().Info("Shop"); ok {
		t.Fatal("s3 has the type Shop")
	}
	testutil.WaitFor(t, "s3 lists Shop from s1", func() bool {
		types, err := c3.Admin().Types(t.Context(), "shop")
		return err == nil && len(types) == 1 && types[0].Skills[0].InputSchema == string(skill.InputSchema) &&
			types[0].Skills[0].OutputSchema == string(skill.OutputSchema)
	})
	// (Now s3 hosts the type too, for the agents placed on it.)
	if err := s3.Runtime().Registry().Register("Shop", shop, info); err != nil {
		t.Fatal(err)
	}

	// A2A: the card's extension has the same schema.
	card, err := (&agentcard.Resolver{}).Resolve(t.Context(), "http://"+s1.A2AAddr(), agentcard.WithPath("/a2a/Shop/dev/s/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a2aSchema json.RawMessage
	for _, ext := range card.Capabilities.Extensions {
		if ext.URI == a2a.SkillSchemasExtension {
			b, _ := json.Marshal(ext.Params["skills"].(map[string]any)["quote"].(map[string]any)["inputSchema"])
			a2aSchema = b
		}
	}
	if !remoteSameJSON(a2aSchema, skill.InputSchema) {
		t.Fatalf("A2A card schema %s, want %s", a2aSchema, skill.InputSchema)
	}

	// MCP, through an MCP agent of the second cluster: the tool, its
	// schemas, a call, and a refusal by the first silo's MCP server.
	c2, err := client.Dial(t.Context(), []string{s2.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	const agent = "MCP:dev:shop"
	if _, err := c2.Agents().Create(t.Context(), agent, map[string]string{
		mcp.RemoteURL: "http://" + s1.MCPAddr() + "/mcp/Shop/dev/s", mcp.RemoteHeaderPrefix + "X-Agentsilo-Principal": "dev",
	}); err != nil {
		t.Fatal(err)
	}
	r, err := c2.Ask(t.Context(), agent, &client.Message{MessageType: mcp.RemoteListTools})
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Data, &list); err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "quote" {
		t.Fatalf("tools/list: %+v, %v", r, err)
	}
	if !remoteSameJSON(list.Tools[0].InputSchema, skill.InputSchema) || !remoteSameJSON(list.Tools[0].OutputSchema, skill.OutputSchema) {
		t.Fatalf("MCP tool schemas %s, %s; want %s, %s", list.Tools[0].InputSchema, list.Tools[0].OutputSchema, skill.InputSchema, skill.OutputSchema)
	}
	before := runs.Load()
	r, err = c2.Ask(t.Context(), agent, &client.Message{MessageType: "quote", DataType: grain.JSONType, Data: []byte(`{"item":"pen","qty":2}`)})
	if err != nil || string(r.Data) != `{"price":5}` {
		t.Fatalf("quote over MCP: %v, %v", r, err)
	}
	if _, err := c2.Ask(t.Context(), agent, &client.Message{MessageType: "quote", DataType: grain.JSONType, Data: []byte(`{"item":"pen","qty":"2"}`)}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("quote over MCP with bad arguments: %v, want InvalidArgument", err)
	}
	if n := runs.Load() - before; n != 1 {
		t.Fatalf("the agent ran %d times, want once", n)
	}
}

// remoteAgentFunc adapts a handler to grain.Agent.
type remoteAgentFunc func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f remoteAgentFunc) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// remoteSameJSON reports whether a and b are the same JSON value.
func remoteSameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// The MCP agent type against the TypeScript SDK's own server
// (tests/mcpjs/server.mjs: McpServer over StreamableHTTPServerTransport).
func TestRemoteJSServer(t *testing.T) {
	node := testutil.NeedCommand(t, "node", "Debian's nodejs")
	dir := filepath.Join(testutil.RepoRoot(t), "tests", "mcpjs")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk"))
	testutil.Need(t, err == nil, "npm ci --prefix tests/mcpjs")
	cmd := exec.Command(node, "server.mjs")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("server.mjs said %q: %v", line, err)
	}
	url := "http://127.0.0.1:" + port + "/mcp"

	rt := remoteRuntime(t, mcp.RemoteOptions{AllowPrivateNetworks: true})
	const agent = "MCP:system:js"
	if _, err := rt.CreateAgent(t.Context(), "system", agent, map[string]string{mcp.RemoteURL: url, mcp.RemoteAPIKey: "js-key"}); err != nil {
		t.Fatal(err)
	}
	r, err := remoteAsk(t.Context(), rt, agent, mcp.RemoteListTools, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Message, "multiply: Multiplies two numbers.") || !strings.Contains(string(r.Data), `"product"`) {
		t.Fatalf("tools/list: %q %s", r.Message, r.Data)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	r, err = rt.Ask(grain.WithTraceparent(t.Context(), tp), &grain.Message{To: agent, From: "Session:system:test", MessageType: "echo", Data: []byte(`{"text":"hi"}`)})
	if err != nil || !strings.HasPrefix(r.Message, "echo: hi\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-") {
		t.Fatalf("echo: %v, %v", r, err)
	}
	r, err = remoteAsk(t.Context(), rt, agent, mcp.RemoteCallTool, `{"name":"multiply","arguments":{"a":6,"b":7}}`)
	if err != nil || r.Message != "42" || !remoteSameJSON(r.Data, []byte(`{"product":42}`)) {
		t.Fatalf("multiply: %v, %v", r, err)
	}
	if _, err := remoteAsk(t.Context(), rt, agent, "broken", ""); errs.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "out of paper") {
		t.Fatalf("broken: %v, want Unknown with the tool's text", err)
	}
	if _, err := remoteAsk(t.Context(), rt, agent, "multiply", `{"a":"six","b":7}`); err == nil {
		t.Fatal("multiply with a string: no error")
	}
	// Without the key: Unauthenticated.
	if _, err := rt.CreateAgent(t.Context(), "system", "MCP:system:nokey", map[string]string{mcp.RemoteURL: url}); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:nokey", mcp.RemoteListTools, ""); errs.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the key: %v, want Unauthenticated", err)
	}
}

// BenchmarkRemoteCall: an Ask of an MCP agent that calls a tool of a Go
// SDK server on loopback (structured result), one session.
func BenchmarkRemoteCall(b *testing.B) {
	srv := startRemoteServer(b, "127.0.0.1:0")
	rt := remoteRuntime(b, mcp.RemoteOptions{AllowPrivateNetworks: true})
	if _, err := rt.CreateAgent(b.Context(), "system", "MCP:system:tools", map[string]string{mcp.RemoteURL: srv.url()}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := remoteAsk(b.Context(), rt, "MCP:system:tools", "add", `{"a":1,"b":2}`); err != nil {
			b.Fatal(err)
		}
	}
}

// Stdio servers: only the commands the program allows, one process per
// activation, started again after it died.
func TestRemoteStdio(t *testing.T) {
	node := testutil.NeedCommand(t, "node", "Debian's nodejs")
	dir := filepath.Join(testutil.RepoRoot(t), "tests", "mcpjs")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk"))
	testutil.Need(t, err == nil, "npm ci --prefix tests/mcpjs")

	// Off by default: a configuration cannot name a command.
	rt := remoteRuntime(t, mcp.RemoteOptions{})
	if _, err := rt.CreateAgent(t.Context(), "system", "MCP:system:js", map[string]string{mcp.RemoteCommand: "upper"}); err != nil {
		t.Fatal(err)
	}
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:js", mcp.RemoteListTools, ""); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no such MCP server on stdio") {
		t.Fatalf("stdio without Commands: %v, want FailedPrecondition", err)
	}

	rt = remoteRuntime(t, mcp.RemoteOptions{Commands: map[string][]string{"upper": {node, filepath.Join(dir, "stdio-server.mjs")}}})
	for addr, cmd := range map[string]string{"MCP:system:js": "upper", "MCP:system:other": "rm"} {
		if _, err := rt.CreateAgent(t.Context(), "system", addr, map[string]string{mcp.RemoteCommand: cmd}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:other", mcp.RemoteListTools, ""); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a command the program did not allow: %v, want FailedPrecondition", err)
	}
	upper := func() (text string, pid float64) {
		t.Helper()
		r, err := remoteAsk(t.Context(), rt, "MCP:system:js", "upper", `{"text":"hello"}`)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Text string  `json:"text"`
			PID  float64 `json:"pid"`
		}
		if err := json.Unmarshal(r.Data, &out); err != nil || r.Message != "HELLO" || out.Text != "HELLO" {
			t.Fatalf("upper: %v, %v", r, err)
		}
		return out.Text, out.PID
	}
	_, pid1 := upper()
	if _, pid := upper(); pid != pid1 {
		t.Fatalf("a second call ran in process %v, the first in %v: want one process per activation", pid, pid1)
	}
	// The process dies: the call fails, the next one starts it again.
	if _, err := remoteAsk(t.Context(), rt, "MCP:system:js", "crash", `{}`); errs.Code(err) != codes.Unavailable {
		t.Fatalf("crash: %v, want Unavailable", err)
	}
	if _, pid := upper(); pid == pid1 {
		t.Fatalf("after the crash the call ran in the same process %v", pid)
	}
}
