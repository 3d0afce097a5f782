package llm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/mcp"
	"github.com/agentsilo/agentsilo/memory"
)

// runtimeWith starts a runtime with reg's types (and the model type of def).
func runtimeWith(t *testing.T, reg *grain.Registry, def llm.Definition) *grain.Runtime {
	t.Helper()
	if err := llm.Register(reg, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = testutil.Logger()
	cfg.State = grain.NewMemoryStateStore()
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// memory: true gives the model the agent's working memory.
func TestMemoryTools(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "p", Name: "memory_put", Arguments: `{"key": "plan", "text": "buy milk", "category": "todo"}`}}},
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "g", Name: "memory_get", Arguments: `{"key": "plan"}`}, {ID: "s", Name: "memory_search", Arguments: `{"text": "milk"}`}}},
		fakemodel.Step{Text: "noted"},
	)
	defer srv.Close()
	reg := grain.NewRegistry()
	if err := memory.Register(reg, memory.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Tools = []llm.ToolRef{{Memory: true}}
	rt := runtimeWith(t, reg, def)
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "remember to buy milk"})
	if err != nil || r.Message != "noted" {
		t.Fatalf("%v %v", r, err)
	}
	if tools := srv.Requests()[0].Tools; strings.Join(tools, ",") != "memory_put,memory_get,memory_search" {
		t.Errorf("tools %v", tools)
	}
	results := map[string]string{}
	for _, m := range srv.Requests()[2].Messages {
		if m.Role == "tool" {
			results[m.ToolCallID] = m.Data
			if m.Label != "tool-output" {
				t.Errorf("the result of %s is fenced as %q, want tool-output", m.ToolCallID, m.Label)
			}
		}
	}
	if !strings.HasPrefix(results["p"], `kept "plan"`) || !strings.Contains(results["g"], `"text":"buy milk"`) || !strings.Contains(results["s"], "buy milk") {
		t.Errorf("results %v", results)
	}
}

// A tool that asks the model agent back, within the turn's call chain,
// is refused (the agent is in its turn), and the model sees the refusal.
func TestToolAsksBack(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "b", Name: "ask_Caller", Arguments: `{"agent": "x", "text": "hello"}`}}},
		fakemodel.Step{Text: "ok"},
	)
	defer srv.Close()
	reg := grain.NewRegistry()
	if err := reg.Register("Caller", func(h grain.Host) (grain.Agent, error) { return backCaller{h}, nil }); err != nil {
		t.Fatal(err)
	}
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = []llm.ToolRef{{Agent: "Caller"}}
	rt := runtimeWith(t, reg, def)
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "go"})
	if err != nil || r.Message != "ok" {
		t.Fatalf("%v %v", r, err)
	}
	if got := srv.Requests()[1].LastMessage(); !got.IsError || !strings.Contains(got.Text, "FailedPrecondition") || !strings.Contains(got.Text, "in a turn already") {
		t.Errorf("result %+v", got)
	}
}

// backCaller asks Helper:h (its caller) with the text it got.
type backCaller struct{ h grain.Host }

func (b backCaller) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if _, err := b.h.Ask(ctx, "Helper:h", grain.Text(m.Message)); err != nil {
		return nil, err
	}
	return m.Response(), nil
}

// memDirectory is a service directory in memory (grain.DirectoryService)
// for the tools' own logic; TestOutsideTools runs them on the real one.
type memDirectory struct {
	entries []grain.DirectoryEntry

	mu         sync.Mutex
	queries    []grain.DirectoryQuery
	principals []string
}

func (d *memDirectory) Search(_ context.Context, principal string, q grain.DirectoryQuery) ([]grain.DirectoryHit, error) {
	d.mu.Lock()
	d.queries = append(d.queries, q)
	d.principals = append(d.principals, principal)
	d.mu.Unlock()
	hits := []grain.DirectoryHit{}
	for _, e := range d.entries {
		if (q.Kind == "" || e.Kind == q.Kind) && strings.Contains(strings.ToLower(e.Name+" "+e.Description), strings.ToLower(q.Text)) {
			hits = append(hits, grain.DirectoryHit{Entry: e, Score: 1})
		}
	}
	return hits, nil
}

func (d *memDirectory) List(_ context.Context, _ string, q grain.DirectoryQuery) ([]grain.DirectoryEntry, error) {
	var out []grain.DirectoryEntry
	for _, e := range d.entries {
		if q.Kind == "" || e.Kind == q.Kind {
			out = append(out, e)
		}
	}
	return out, nil
}

func (d *memDirectory) Get(_ context.Context, principal, name string) (grain.DirectoryEntry, error) {
	d.mu.Lock()
	d.principals = append(d.principals, principal)
	d.mu.Unlock()
	kind, n, ok := strings.Cut(name, "/")
	if !ok {
		kind, n = "", name
	}
	for _, e := range d.entries {
		if e.Name == n && (kind == "" || e.Kind == kind) {
			return e, nil
		}
	}
	return grain.DirectoryEntry{}, errs.New(codes.NotFound, "directory: no entry %q", name)
}

// runtimeWithDirectory starts a runtime with reg's types, the model
// types of defs and dir as its service directory (none if nil).
func runtimeWithDirectory(t *testing.T, reg *grain.Registry, dir grain.DirectoryService, defs ...llm.Definition) *grain.Runtime {
	t.Helper()
	for _, def := range defs {
		if err := llm.Register(reg, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := grain.DefaultConfig()
	cfg.Logger = testutil.Logger()
	cfg.State = grain.NewMemoryStateStore()
	if dir != nil {
		cfg.Directory = dir
	}
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// The directory tools search and read the directory on behalf of the
// turn's principal, with the model's query as it gave it; an entry the
// directory does not have is the tool's error.
func TestDirectoryTools(t *testing.T) {
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{
			{ID: "s", Name: "directory_search", Arguments: `{"text": "weather", "kind": "a2a", "tag": "forecast", "limit": 3}`},
			{ID: "d", Name: "directory_details", Arguments: `{"name": "a2a/weather"}`},
			{ID: "n", Name: "directory_details", Arguments: `{"name": "nosuch"}`},
			{ID: "k", Name: "directory_search", Arguments: `{"text": "weather", "kind": "robots"}`},
		}},
		fakemodel.Step{Text: "found it"},
	)
	defer srv.Close()
	dir := &memDirectory{entries: []grain.DirectoryEntry{
		{Name: "weather", Kind: grain.KindA2A, Description: "Weather reports.", Call: "A2A:{owner}:weather", Skills: []grain.Skill{{Name: "forecast", Description: "Tells the forecast.", Tags: []string{"forecast"}}}},
		{Name: "weather", Kind: grain.KindMCP, Description: "Weather data.", Call: "MCP:{owner}:weather", Tools: []grain.DirectoryTool{{Name: "rain", Description: "Rain in mm."}}},
	}}
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = []llm.ToolRef{{Directory: true}}
	rt := runtimeWithDirectory(t, grain.NewRegistry(), dir, def)
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "who tells the weather?", OnBehalfOf: "alice"})
	if err != nil || r.Message != "found it" {
		t.Fatalf("%v %v", r, err)
	}
	if tools := srv.Requests()[0].Tools; strings.Join(tools, ",") != "directory_search,directory_details" {
		t.Errorf("tools %v", tools)
	}
	results := map[string]fakemodel.Message{}
	for _, m := range srv.Requests()[1].Messages {
		if m.Role == "tool" {
			results[m.ToolCallID] = m
		}
	}
	if got, want := results["s"].Data, `[{"name":"weather","kind":"a2a","description":"Weather reports.","call":"A2A:{owner}:weather","skills":[{"name":"forecast","description":"Tells the forecast."}]}]`; got != want || results["s"].IsError {
		t.Errorf("search result\n%s\nwant\n%s", got, want)
	}
	if d := results["d"]; d.IsError || !strings.Contains(d.Text, `"Kind":"a2a"`) || !strings.Contains(d.Text, `"Tags":["forecast"]`) {
		t.Errorf("details result %+v", d)
	}
	if n := results["n"]; !n.IsError || !strings.Contains(n.Text, "NotFound") {
		t.Errorf("details of nosuch %+v", n)
	}
	if k := results["k"]; !k.IsError || !strings.Contains(k.Text, "schema") {
		t.Errorf("search of an unknown kind %+v", k)
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if len(dir.queries) != 1 || dir.queries[0] != (grain.DirectoryQuery{Text: "weather", Kind: grain.KindA2A, Tag: "forecast", Limit: 3}) {
		t.Errorf("queries %+v", dir.queries)
	}
	for _, p := range dir.principals {
		if p != "alice" {
			t.Errorf("a directory read on behalf of %q, want alice", p)
		}
	}
}

// An mcp or a2a entry naming what the directory does not have (or has
// of the other kind), or a silo without a directory, fails the tools'
// build, naming the field; the model is not asked.
func TestOutsideToolsNotInDirectory(t *testing.T) {
	srv := fakemodel.New()
	defer srv.Close()
	model := definition(llm.ProviderAnthropic, srv.URL()).Model
	dir := &memDirectory{entries: []grain.DirectoryEntry{{Name: "files", Kind: grain.KindMCP}}}
	defs := []llm.Definition{
		{Type: "NoMCP", Model: model, Tools: []llm.ToolRef{{Memory: true}, {MCP: "nosuch"}}},
		{Type: "NoA2A", Model: model, Tools: []llm.ToolRef{{A2A: "files"}}},
	}
	rt := runtimeWithDirectory(t, grain.NewRegistry(), dir, defs...)
	for to, field := range map[string]string{"NoMCP:h": "tools[1].mcp", "NoA2A:h": "tools[0].a2a"} {
		_, err := rt.Ask(t.Context(), &grain.Message{From: session, To: to, Message: "hello"})
		if errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "not in the directory") {
			t.Errorf("%s: %v, want FailedPrecondition naming %s", to, err, field)
		}
	}
	bare := runtimeWithDirectory(t, grain.NewRegistry(), nil, llm.Definition{Type: "Bare", Model: model, Tools: []llm.ToolRef{{MCP: "files"}}})
	_, err := bare.Ask(t.Context(), &grain.Message{From: session, To: "Bare:h", Message: "hello"})
	if errs.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "tools[0].mcp") {
		t.Errorf("without a directory: %v, want Unavailable naming tools[0].mcp", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
}

// The tools of an MCP server the directory lists without tools (not
// fetched yet) are the server's own, listed through the MCP agent type;
// a call carries its idempotency key to the server. When the server does
// not answer the listing, the directory's tools take any JSON object, and
// a call's failure reaches the model as the tool's error.
func TestMCPTools(t *testing.T) {
	arch := startArchive(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	srv := fakemodel.New(
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "m1", Name: "archive_add_note", Arguments: `{"text": "hello"}`}}},
		fakemodel.Step{Text: "filed"},
		fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "g1", Name: "gone_add_note", Arguments: `{"text": "hello"}`}}},
		fakemodel.Step{Text: "the archive is down"},
	)
	defer srv.Close()
	reg := grain.NewRegistry()
	err := mcp.RegisterRemote(reg, mcp.RemoteOptions{AllowPrivateNetworks: true, Resolve: func(_ context.Context, _, alias string) (string, map[string]string, bool, error) {
		switch alias {
		case "archive":
			return arch.url, nil, true, nil
		case "gone":
			return down.URL, nil, true, nil
		}
		return "", nil, false, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	dir := &memDirectory{entries: []grain.DirectoryEntry{
		{Name: "archive", Kind: grain.KindMCP},
		{Name: "gone", Kind: grain.KindMCP, Tools: []grain.DirectoryTool{{Name: "add_note", Description: "Files a note."}}},
	}}
	def := definition(llm.ProviderAnthropic, srv.URL())
	def.Tools = []llm.ToolRef{{MCP: "archive"}}
	gone := def
	gone.Type, gone.Tools = "Gone", []llm.ToolRef{{MCP: "gone"}}
	rt := runtimeWithDirectory(t, reg, dir, def, gone)

	if r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", Message: "file hello"}); err != nil || r.Message != "filed" {
		t.Fatalf("%v %v", r, err)
	}
	first := srv.Requests()[0]
	if strings.Join(first.Tools, ",") != "archive_add_note,archive_fail" || !strings.Contains(string(first.Schemas["archive_add_note"]), `"text"`) {
		t.Errorf("tools %v, schemas %s", first.Tools, first.Schemas)
	}
	if got := srv.Requests()[1].LastMessage(); got.IsError || got.Data != "filed note 1\n{\"count\":1}" || got.Label != "tool-output" || !got.Outside {
		t.Errorf("result %+v", got)
	}
	r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Helper:h", MessageType: llm.SkillConversation, DataType: grain.JSONType})
	if err != nil {
		t.Fatal(err)
	}
	var c llm.Conversation
	if err := json.Unmarshal(r.Data, &c); err != nil || len(c.Turns) != 1 {
		t.Fatalf("%v %+v", err, c)
	}
	turn := c.Turns[0].ID
	if _, keys := arch.filed(); len(keys) != 1 || keys[0] != turn+"/1/m1" {
		t.Errorf("keys %q, want %s/1/m1", keys, turn)
	}

	if r, err := rt.Ask(t.Context(), &grain.Message{From: session, To: "Gone:h", Message: "file hello"}); err != nil || r.Message != "the archive is down" {
		t.Fatalf("%v %v", r, err)
	}
	third := srv.Requests()[2]
	if strings.Join(third.Tools, ",") != "gone_add_note" || strings.Contains(string(third.Schemas["gone_add_note"]), "text") {
		t.Errorf("tools %v, schemas %s", third.Tools, third.Schemas)
	}
	if got := srv.Requests()[3].LastMessage(); !got.IsError || !strings.Contains(got.Text, "Unavailable") {
		t.Errorf("result %+v", got)
	}
}
