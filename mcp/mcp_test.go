package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/mcp/mcptest"
)

// The every-agent endpoint lists each type's skills as tools with their
// schemas, and a call asks the agent its agent argument names: text in
// and out, JSON arguments and structured content, an agent's error as
// isError, bad arguments refused as invalid params before any agent runs.
func TestEveryAgent(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	cs := mustConnect(t, s, "/mcp", dev, nil)

	tools := map[string]*mcpsdk.Tool{}
	for tl, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools[tl.Name] = tl
	}
	for _, name := range []string{"Echo_echo", "Counter_count", "Progress_think", "Add_add", "Slow_wait", "Fail_fail"} {
		if tools[name] == nil {
			t.Fatalf("tools/list has no %s: %v", name, slices.Sorted(mapsKeys(tools)))
		}
	}
	var echoIn struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	remarshal(t, tools["Echo_echo"].InputSchema, &echoIn)
	if _, ok := echoIn.Properties["message"]; !ok || !slices.Equal(echoIn.Required, []string{"agent"}) {
		t.Fatalf("Echo_echo's input schema: %+v, want message and a required agent", echoIn)
	}
	var addOut map[string]any
	remarshal(t, tools["Add_add"].OutputSchema, &addOut)
	if addOut["type"] != "object" {
		t.Fatalf("Add_add's output schema: %v", addOut)
	}

	res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Echo_echo", Arguments: map[string]any{"agent": "dev:e1", "message": "hello"}})
	if err != nil || res.IsError || !slices.Equal(texts(res), []string{"hello"}) {
		t.Fatalf("Echo_echo: %+v %v, want the text hello", res, err)
	}

	res, err = cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Add_add", Arguments: map[string]any{"agent": "dev:a1", "a": 2, "b": 3.5}})
	if err != nil || res.IsError {
		t.Fatalf("Add_add: %+v %v", res, err)
	}
	var sum struct{ Sum float64 }
	remarshal(t, res.StructuredContent, &sum)
	if sum.Sum != 5.5 || len(texts(res)) != 1 || !strings.Contains(texts(res)[0], "5.5") {
		t.Fatalf("Add_add: structured %v, text %v; want sum 5.5 in both", res.StructuredContent, texts(res))
	}

	res, err = cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Fail_fail", Arguments: map[string]any{"agent": "dev:f1", "message": "FailedPrecondition"}})
	if err != nil || !res.IsError || len(texts(res)) != 1 || !strings.HasPrefix(texts(res)[0], "FailedPrecondition: failing with FailedPrecondition") {
		t.Fatalf("Fail_fail: %+v %v, want isError with the code and message", res, err)
	}

	for _, bad := range []struct {
		name string
		args any
		want string
	}{
		{"Add_add", map[string]any{"agent": "dev:a1", "a": "two", "b": 3}, "do not match its input schema"},
		{"Add_add", map[string]any{"agent": "dev:a1", "a": 1, "b": 2, "c": 3}, "do not match its input schema"},
		{"Add_add", map[string]any{"a": 1, "b": 2}, `argument "agent" missing`},
		{"Echo_echo", map[string]any{"agent": "e1", "message": "x"}, "want owner:alias"},
		{"Echo_echo", map[string]any{"agent": "dev:e/1", "message": "x"}, "bad alias"},
		{"Echo_echo", map[string]any{"agent": 7, "message": "x"}, "want a string"},
		{"Echo_echo", map[string]any{"agent": "dev:e1", "message": 7}, "do not match its input schema"},
		{"Nope_nope", map[string]any{}, "unknown tool"},
	} {
		_, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: bad.name, Arguments: bad.args})
		if rpcCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %v: %v, want invalid params (%d) saying %q", bad.name, bad.args, err, jsonrpc.CodeInvalidParams, bad.want)
		}
	}
}

// An agent's own endpoint lists its type's skills by name and calls that
// agent; a session belongs to its path.
func TestAgentEndpoint(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	cs := mustConnect(t, s, "/mcp/Counter/dev/c1", dev, nil)
	var names []string
	for tl, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
	}
	if !slices.Equal(names, []string{"count"}) {
		t.Fatalf("tools of Counter:dev:c1: %v, want [count]", names)
	}
	for want := 1; want <= 2; want++ {
		res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "count", Arguments: map[string]any{}})
		if err != nil || res.IsError || !slices.Equal(texts(res), []string{fmt.Sprint(want)}) {
			t.Fatalf("count %d: %+v %v", want, res, err)
		}
	}
	// The every-agent endpoint reaches the same agent.
	every := mustConnect(t, s, "/mcp", dev, nil)
	res, err := every.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "dev:c1", "message": "get"}})
	if err != nil || !slices.Equal(texts(res), []string{"2"}) {
		t.Fatalf("Counter_count get: %+v %v, want 2", res, err)
	}
	if _, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "count", Arguments: map[string]any{"agent": "dev:c1"}}); rpcCode(err) != jsonrpc.CodeInvalidParams {
		t.Fatalf("count with an agent argument on an agent's endpoint: %v, want invalid params", err)
	}
	for _, path := range []string{"/mcp/Nope/dev/x", "/mcp/Counter/dev", "/mcp/Counter/dev/c1/extra", "/mcp/Counter/d:v/c1"} {
		if _, err := connect(t, s, path, dev, nil); err == nil {
			t.Errorf("connect %s: no error, want not found", path)
		}
	}
}

// Pushes during a call become progress notifications for a client that
// sent a progress token.
func TestProgress(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	p := newProgress()
	cs := mustConnect(t, s, "/mcp", dev, p)
	params := &mcpsdk.CallToolParams{Name: "Progress_think", Arguments: map[string]any{"agent": "dev:p1", "message": "a trip"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || !slices.Equal(texts(res), []string{`done: a trip`}) {
		t.Fatalf("Progress_think: %+v %v", res, err)
	}
	want := []string{`thinking 1/3 about "a trip"`, `thinking 2/3 about "a trip"`, `thinking 3/3 about "a trip"`}
	// The client hands notifications to its handler on a goroutine of
	// its own: they may come in after the result.
	testutil.WaitFor(t, "three progress notifications", func() bool { return len(p.all()) >= len(want) })
	if got := p.all(); !slices.Equal(got, want) {
		t.Fatalf("progress: %q, want %q", got, want)
	}
}

// The client's cancellation cancels the agent's turn, on the silo that
// runs it: a call through s1's MCP server to a Slow agent that lives on
// s2, cancelled once it started, ends the turn on s2 with Canceled.
func TestCancelAcrossSilos(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "s1", "/m/", nil)
	startSilo(t, e, "s2", "/m/", nil)
	waitMembers(t, s1, 2)
	alias := ""
	for i := 0; alias == ""; i++ {
		if a := fmt.Sprintf("w%d", i); cluster.Owner("Slow:dev:"+a, []string{"s1", "s2"}) == "s2" {
			alias = a
		}
	}
	p := newProgress()
	cs := mustConnect(t, s1, "/mcp", dev, p)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	params := &mcpsdk.CallToolParams{Name: "Slow_wait", Arguments: map[string]any{"agent": "dev:" + alias}}
	params.SetProgressToken(1)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	if got := <-p.seen; got != "started" {
		t.Fatalf("progress %q, want started", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	if err := <-mcptest.Ended("Slow:dev:" + alias); !errors.Is(err, context.Canceled) {
		t.Fatalf("the turn on s2 ended with %v, want context canceled", err)
	}
	if on := mcptest.RanOn("Slow:dev:" + alias); on != "s2" {
		t.Fatalf("the turn ran on %q, want s2", on)
	}
	// The session goes on.
	res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Echo_echo", Arguments: map[string]any{"agent": "dev:e1", "message": "still here"}})
	if err != nil || !slices.Equal(texts(res), []string{"still here"}) {
		t.Fatalf("after the cancel: %+v %v", res, err)
	}
}

// With API keys, a client without one is refused (HTTP 401, before MCP);
// a caller is refused a call (Message) and an agent's listing (Read) on
// an agent the ACL does not give it, with the JSON-RPC code of a denied
// permission, and no agent runs.
func TestAccessControl(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: keyHash("alice-key"), Principal: "alice"}, {SHA256: keyHash("bob-key"), Principal: "bob"}}
	})
	if _, err := connect(t, s, "/mcp", nil, nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("connect without a key: %v, want 401 Unauthorized", err)
	}
	if _, err := connect(t, s, "/mcp", map[string]string{"x-api-key": "wrong"}, nil); err == nil {
		t.Fatal("connect with a wrong key: no error")
	}
	alice := mustConnect(t, s, "/mcp", map[string]string{"Authorization": "Bearer alice-key"}, nil)
	res, err := alice.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "alice:c1"}})
	if err != nil || !slices.Equal(texts(res), []string{"1"}) {
		t.Fatalf("alice counts on her agent: %+v %v", res, err)
	}
	bob := mustConnect(t, s, "/mcp", map[string]string{"x-api-key": "bob-key"}, nil)
	_, err = bob.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "alice:c1"}})
	if rpcCode(err) != mcp.CodePermissionDenied || !strings.Contains(err.Error(), "Message") {
		t.Fatalf("bob counts on alice's agent: %v, want permission denied (%d) naming Message", err, mcp.CodePermissionDenied)
	}
	bobOnAlice := mustConnect(t, s, "/mcp/Counter/alice/c1", map[string]string{"x-api-key": "bob-key"}, nil)
	if _, err := bobOnAlice.ListTools(t.Context(), nil); rpcCode(err) != mcp.CodePermissionDenied || !strings.Contains(err.Error(), "Read") {
		t.Fatalf("bob lists alice's agent's tools: %v, want permission denied naming Read", err)
	}
	if _, err := bobOnAlice.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "count"}); rpcCode(err) != mcp.CodePermissionDenied {
		t.Fatalf("bob counts on alice's agent's endpoint: %v, want permission denied", err)
	}
	// Bob's calls did not run: the count is alice's one.
	res, err = alice.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Counter_count", Arguments: map[string]any{"agent": "alice:c1", "message": "get"}})
	if err != nil || !slices.Equal(texts(res), []string{"1"}) {
		t.Fatalf("alice's count after bob's refused calls: %+v %v, want 1", res, err)
	}
}

// waitMembers waits until s's view has n silos.
func waitMembers(t *testing.T, s *cluster.Silo, n int) {
	t.Helper()
	gc, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	testutil.WaitFor(t, fmt.Sprintf("%d silos in the view", n), func() bool {
		m, err := gc.Admin().Members(t.Context())
		return err == nil && len(m) >= n
	})
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// remarshal decodes v's JSON form into out.
func remarshal(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if reflect.ValueOf(out).Elem().IsZero() {
		t.Fatalf("%s decoded to nothing", b)
	}
}

// A client that goes away (its HTTP request for the call ends, without
// notifications/cancelled) cancels the call's turn: the server keeps no
// events to replay, so nobody could read its result.
func TestRequestGone(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	url := "http://" + s.MCPAddr() + "/mcp"
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	session := ""
	post := func(ctx context.Context, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("x-agentsilo-principal", "dev")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode/100 != 2 {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("POST %s: %s %s", body, res.Status, b)
		}
		return res
	}
	res := post(t.Context(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session = res.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	res = post(t.Context(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	res.Body.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res = post(ctx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Slow_wait","arguments":{"agent":"dev:gone"},"_meta":{"progressToken":"p"}}}`)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"started"`) {
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	cancel() // the client goes away
	res.Body.Close()
	if err := <-mcptest.Ended("Slow:dev:gone"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the turn of a call whose client went away ended with %v, want context canceled", err)
	}
}

// A silo program's own tool, added with AddTool, runs on behalf of the
// authenticated caller (CallerFrom); a tool without a valid name or an
// object input schema is skipped, not a panic.
func TestAddTool(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	s.MCP().AddTool(&mcpsdk.Tool{Name: "whoami", Description: "who calls", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			c, ok := mcp.CallerFrom(ctx)
			if !ok {
				return nil, errors.New("no caller")
			}
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: c.Principal}}}, nil
		})
	s.MCP().AddTool(&mcpsdk.Tool{Name: "bad name", InputSchema: map[string]any{"type": "object"}}, nil)
	s.MCP().AddTool(&mcpsdk.Tool{Name: "noschema"}, func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) { return nil, nil })
	s.MCP().AddTool(&mcpsdk.Tool{Name: "stringschema", InputSchema: map[string]any{"type": "string"}}, func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) { return nil, nil })
	cs := mustConnect(t, s, "/mcp", map[string]string{"x-agentsilo-principal": "carol"}, nil)
	res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "whoami"})
	if err != nil || !slices.Equal(texts(res), []string{"carol"}) {
		t.Fatalf("whoami: %+v %v, want carol", res, err)
	}
	for tl, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tl.Name == "bad name" || tl.Name == "noschema" || tl.Name == "stringschema" {
			t.Errorf("tools/list has %q, which AddTool should have skipped", tl.Name)
		}
	}
}

// A silo holds at most MaxSessions MCP sessions: one more is refused
// until one closes.
func TestMaxSessions(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", func(c *cluster.SiloConfig) { c.MCP.MaxSessions = 2 })
	// The Go client's connect may make a short-lived session of its own
	// first: wait for each one to get in.
	var first *mcpsdk.ClientSession
	testutil.WaitFor(t, "a first session", func() bool {
		cs, err := connect(t, s, "/mcp", dev, nil)
		first = cs
		return err == nil
	})
	testutil.WaitFor(t, "a second session", func() bool {
		_, err := connect(t, s, "/mcp/Echo/dev/e1", dev, nil)
		return err == nil
	})
	if _, err := connect(t, s, "/mcp", dev, nil); err == nil {
		t.Fatal("a third session was opened; want it refused at MaxSessions 2")
	}
	first.Close()
	testutil.WaitFor(t, "a session after one closed", func() bool {
		cs, err := connect(t, s, "/mcp", dev, nil)
		if err == nil {
			cs.Close()
		}
		return err == nil
	})
}

// A silo that closes with a call still running gives it two thirds of
// its deadline, then cancels its turn: the agent sees Canceled, the
// client gets its answer (the silo shut down) or loses the connection,
// and Close says calls were cut.
func TestCloseCutsCalls(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/m/", nil)
	closedEarly[s] = true
	p := newProgress()
	cs := mustConnect(t, s, "/mcp", dev, p)
	params := &mcpsdk.CallToolParams{Name: "Slow_wait", Arguments: map[string]any{"agent": "dev:closing"}}
	params.SetProgressToken("c")
	done := make(chan struct{})
	var res *mcpsdk.CallToolResult
	var callErr error
	go func() {
		defer close(done)
		res, callErr = cs.CallTool(t.Context(), params)
	}()
	if got := <-p.seen; got != "started" {
		t.Fatalf("progress %q, want started", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := s.Close(ctx); err == nil || !strings.Contains(err.Error(), "tool calls still running") {
		t.Fatalf("Close with a call running: %v, want the calls cut", err)
	}
	if err := <-mcptest.Ended("Slow:dev:closing"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the turn ended with %v, want context canceled", err)
	}
	<-done
	if callErr == nil && (!res.IsError || !strings.HasPrefix(texts(res)[0], "Unavailable")) {
		t.Fatalf("the cut call: %+v, want an error or isError Unavailable", res)
	}
}
