package llm_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/mcp"
)

// archive is an MCP server outside the cluster, made with the MCP Go SDK:
// add_note files a note (its effect) and answers how many there are;
// fail always fails. It records the idempotency key each call's _meta
// carried.
type archive struct {
	url string

	mu    sync.Mutex
	notes []string
	keys  []string
}

type noteIn struct {
	Text string `json:"text" jsonschema:"the note's text"`
}

type noteOut struct {
	Count int `json:"count"`
}

func startArchive(t *testing.T) *archive {
	t.Helper()
	a := &archive{}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "archive", Version: "1"}, nil)
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "add_note", Description: "Files a note in the team's archive."},
		func(_ context.Context, req *mcpsdk.CallToolRequest, in noteIn) (*mcpsdk.CallToolResult, noteOut, error) {
			key, _ := req.Params.GetMeta()[mcp.MetaIdempotencyKey].(string)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.notes = append(a.notes, in.Text)
			a.keys = append(a.keys, key)
			n := len(a.notes)
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: fmt.Sprintf("filed note %d", n)}}}, noteOut{Count: n}, nil
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcpsdk.CallToolRequest, struct{}) (*mcpsdk.CallToolResult, any, error) {
			return nil, nil, errors.New("the archive is read-only today")
		})
	srv := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, &mcpsdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	a.url = srv.URL
	return a
}

func (a *archive) filed() ([]string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.notes...), append([]string(nil), a.keys...)
}

// startToolSilo starts a silo on a new embedded etcd with the Counter
// type and reg's types, the A2A and MCP agent types (their guards and the
// directory's lifted: the outside servers are on loopback), and the ACL
// doc. It is closed at the test's end.
func startToolSilo(t *testing.T, reg *grain.Registry, acl string) *cluster.Silo {
	t.Helper()
	return startToolSiloOn(t, etcdtest.Start(t), "s1", reg, acl)
}

// startToolSiloOn starts the silo name of reg's types over e, beside the
// other silos e holds.
func startToolSiloOn(t *testing.T, e *etcdtest.Server, name string, reg *grain.Registry, acl string) *cluster.Silo {
	t.Helper()
	aclFile := t.TempDir() + "/acl.json"
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/llm-tools/"}
	cfg.Logger = testutil.Logger()
	cfg.ACLFile = aclFile
	cfg.A2A.Addr = "127.0.0.1:0" // the A2A agent type comes with A2A
	cfg.A2A.AllowPrivateNetworks = true
	cfg.MCP.AllowPrivateNetworks = true
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

func dialAs(t *testing.T, s *cluster.Silo, principal string) *client.Client {
	t.Helper()
	cl, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal(principal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// toolResults are the tool results of a model request, by call id.
func toolResults(r fakemodel.Request) map[string]fakemodel.Message {
	out := map[string]fakemodel.Message{}
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m
		}
	}
	return out
}

var taskIDArg = regexp.MustCompile(`task_id "([^"]+)"`)

// One model agent whose tools are a typed skill of a cluster agent, the
// tools of an outside MCP server (made with the MCP Go SDK) and an outside
// A2A agent (the official A2A SDK's server) from the directory, and the
// directory's search and details, on a silo over a real etcd, asked
// through the gateway. The model calls each in one step: each has its
// effect (the counter's total, the archive's note, the A2A task's end)
// and the model gets each one's result; the A2A task runs long, and the
// turn waits for its end; the idempotency key of each call reaches the
// outside MCP server (in _meta) and the A2A agent (the message's id and
// metadata). A question of the A2A agent reaches the model, and its
// answer the same task. A principal the ACL lets message the model agent
// only gets the refusals of its other calls as the tools' errors. A name
// the directory does not have fails the tools' build, naming the field.
func TestOutsideTools(t *testing.T) {
	arch := startArchive(t)
	out := outside.Start(true)
	defer out.Close()

	var taskID string
	model := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		switch r.N {
		case 1:
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{
				addCall("c1", "c", 5),
				{ID: "m1", Name: "archive_add_note", Arguments: `{"text": "release 1.2 is out"}`},
				{ID: "m2", Name: "archive_add_note", Arguments: `{"txt": "misspelt"}`},
				{ID: "m3", Name: "archive_fail", Arguments: `{}`},
				{ID: "a1", Name: "ask_builder", Arguments: `{"message": "slow release 1.2"}`},
				{ID: "d1", Name: "directory_search", Arguments: `{"text": "archive notes"}`},
				{ID: "d2", Name: "directory_details", Arguments: `{"name": "builder"}`},
			}}
		case 2:
			return fakemodel.Step{Text: "all done"}
		case 3:
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "q1", Name: "ask_builder", Arguments: `{"message": "ask 1"}`}}}
		case 4:
			if m := taskIDArg.FindStringSubmatch(r.LastMessage().Text); m != nil {
				taskID = m[1]
			}
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "q2", Name: "ask_builder", Arguments: fmt.Sprintf(`{"message": "blue", "task_id": %q}`, taskID)}}}
		case 5:
			return fakemodel.Step{Text: "answered"}
		case 6:
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{
				addCall("c1", "bob:c", 1),
				{ID: "m1", Name: "archive_add_note", Arguments: `{"text": "from mallory"}`},
				{ID: "a1", Name: "ask_builder", Arguments: `{"message": "from mallory"}`},
				{ID: "d1", Name: "directory_search", Arguments: `{"text": "archive"}`},
			}}
		default:
			return fakemodel.Step{Text: "refused"}
		}
	})
	defer model.Close()

	reg := grain.NewRegistry()
	registerCounter(t, reg, nil, nil)
	def := definition(llm.ProviderAnthropic, model.URL())
	def.Tools = []llm.ToolRef{{Agent: "Counter"}, {MCP: "archive"}, {A2A: "builder"}, {Directory: true}}
	for _, d := range []llm.Definition{def, {Type: "NoMCP", Model: def.Model, Tools: []llm.ToolRef{{Memory: true}, {MCP: "nosuch"}}}, {Type: "NoA2A", Model: def.Model, Tools: []llm.ToolRef{{A2A: "archive"}}}} {
		if err := llm.Register(reg, d, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
			t.Fatal(err)
		}
	}
	s := startToolSilo(t, reg, `{"Rules": [
		{"OwnerPattern": "system", "AgentPattern": "directory", "CallerPattern": "alice", "Permission": "Read"},
		{"OwnerPattern": "alice", "AgentPattern": "h", "CallerPattern": "mallory", "Permission": "Message"}
	]}`)
	ctx := t.Context()
	for _, sp := range []directory.Spec{{Name: "archive", Kind: grain.KindMCP, URL: arch.url}, {Name: "builder", Kind: grain.KindA2A, URL: out.URL}} {
		if _, err := s.Directory().Add(ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the directory fetched the archive's tools and the builder's card", func() bool {
		a, err1 := s.Directory().Get(ctx, "archive")
		b, err2 := s.Directory().Get(ctx, "builder")
		return err1 == nil && err2 == nil && len(a.Tools) == 2 && !b.LastSeen.IsZero()
	})
	alice := dialAs(t, s, "alice")

	// The first turn: every tool in one step, the A2A task long.
	type answer struct {
		r   *client.Message
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := alice.Ask(ctx, "Helper:alice:h", &client.Message{Message: "release 1.2"})
		done <- answer{r, err}
	}()
	testutil.WaitFor(t, "the A2A task sent, the archive's note filed", func() bool {
		notes, _ := arch.filed()
		return out.Sends() == 1 && len(notes) == 1
	})
	if n := len(model.Requests()); n != 1 {
		t.Fatalf("the model was asked %d times before the A2A task ended, want once: the turn waits for the task", n)
	}
	out.Release()
	a := <-done
	if a.err != nil || a.r.Message != "all done" {
		t.Fatalf("first turn: %v %v", a.r, a.err)
	}
	first, second := model.Requests()[0], model.Requests()[1]
	if got := strings.Join(first.Tools, ","); got != "Counter_add,archive_add_note,archive_fail,ask_builder,directory_search,directory_details,get_from_working_memory" {
		t.Errorf("tools offered: %s", got)
	}
	if s := string(first.Schemas["archive_add_note"]); !strings.Contains(s, `"text"`) {
		t.Errorf("archive_add_note's schema is not the server's: %s", s)
	}
	if s := string(first.Schemas["ask_builder"]); !strings.Contains(s, `"message"`) {
		t.Errorf("ask_builder's schema: %s", s)
	}
	res := toolResults(second)
	check := func(id string, isError bool, want ...string) {
		t.Helper()
		r := res[id]
		if r.IsError != isError {
			t.Errorf("%s: error %v, want %v: %s", id, r.IsError, isError, r.Text)
		}
		for _, w := range want {
			if !strings.Contains(r.Text, w) {
				t.Errorf("%s: %q does not say %q", id, r.Text, w)
			}
		}
	}
	check("c1", false, `{"total":5}`)
	check("m1", false, "filed note 1", `{"count":1}`)
	check("m2", true, "do not match the tool's schema")
	check("m3", true, "Unknown", "the archive is read-only today")
	check("a1", false, "done: release 1.2")
	check("d1", false, `"name":"archive"`, `"kind":"mcp"`, `"call":"MCP:{owner}:archive"`)
	check("d2", false, `"Kind":"a2a"`, "an outside A2A agent for tests")
	if r, err := alice.Ask(ctx, "Counter:alice:c", &client.Message{Message: "total?"}); err != nil || r.Message != "5" {
		t.Errorf("the counter's total: %v %v", r, err)
	}
	conv := conversation(t, alice, "Helper:alice:h")
	turn := conv.Turns[0].ID
	notes, keys := arch.filed()
	if len(notes) != 1 || notes[0] != "release 1.2 is out" || keys[0] != turn+"/1/m1" {
		t.Errorf("the archive filed %q under keys %q, want one note under %s/1/m1", notes, keys, turn)
	}
	msgs := out.Messages()
	if len(msgs) != 1 || msgs[0].ID != turn+"/1/a1" || msgs[0].Metadata[a2a.MetaIdempotencyKey] != turn+"/1/a1" {
		t.Errorf("the A2A agent got %d messages: %+v, want one with id and metadata %s/1/a1", len(msgs), msgs, turn)
	}

	// A question of the A2A agent, answered on its task.
	if r, err := alice.Ask(ctx, "Helper:alice:h", &client.Message{Message: "ask the builder"}); err != nil || r.Message != "answered" {
		t.Fatalf("second turn: %v %v", r, err)
	}
	reqs := model.Requests()
	if q := toolResults(reqs[3])["q1"]; q.IsError || !strings.Contains(q.Text, "question 1 of 1?") || taskID == "" {
		t.Errorf("the question: %+v (task %q)", q, taskID)
	}
	if r := toolResults(reqs[4])["q2"]; r.IsError || r.Data != "answers: blue" || r.Label != "tool-output" || !r.Outside {
		// tool-output: the conversation holds the MCP server's results, so
		// what the model sends is tool-output, and the reply to it too.
		t.Errorf("the answer's result: %+v", r)
	}

	// Another principal, who may message alice's model agent and nothing
	// else: its turn may not ask bob's counter nor read the directory, and
	// sees each refusal as the tool's error. The MCP server and the A2A
	// agent are called through alice's agents MCP:alice:archive and
	// A2A:alice:builder, her model agent's own (as an agent tool on one of
	// alice's agents would be): who may message the model agent may use
	// them.
	mallory := dialAs(t, s, "mallory")
	if r, err := mallory.Ask(ctx, "Helper:alice:h", &client.Message{Message: "file my note"}); err != nil || r.Message != "refused" {
		t.Fatalf("mallory's turn: %v %v", r, err)
	}
	res = toolResults(model.Requests()[6])
	check("c1", true, "PermissionDenied", "bob")
	check("d1", true, "PermissionDenied")
	check("m1", false, "filed note 2")
	check("a1", false, "from mallory")
	if r, err := dialAs(t, s, "bob").Ask(ctx, "Counter:bob:c", &client.Message{Message: "total?"}); err != nil || r.Message != "0" {
		t.Errorf("bob's counter after mallory's turn: %v %v", r, err)
	}

	// Names the directory does not have (or has of the other kind).
	for to, field := range map[string]string{"NoMCP:alice:x": "tools[1].mcp", "NoA2A:alice:x": "tools[0].a2a"} {
		_, err := alice.Ask(ctx, to, &client.Message{Message: "hello"})
		if errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "not in the directory") {
			t.Errorf("%s: %v, want FailedPrecondition naming %s", to, err, field)
		}
	}
	if n := len(model.Requests()); n != 7 {
		t.Errorf("%d model requests, want 7: a tool build that failed asks no model", n)
	}
}

// conversation reads the model agent's record through the SDK.
func conversation(t *testing.T, cl *client.Client, to string) llm.Conversation {
	t.Helper()
	r, err := cl.Ask(t.Context(), to, &client.Message{MessageType: llm.SkillConversation, DataType: grain.JSONType})
	if err != nil {
		t.Fatal(err)
	}
	var c llm.Conversation
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// A call to an outside A2A agent made in the background: the tool answers
// at once with the task, the turn ends; the agent's answer comes later as
// a turn of its own, a synthetic user message naming the task, and the
// whole answer is read with get_from_working_memory.
func TestBackgroundAnswer(t *testing.T) {
	out := outside.Start(true)
	defer out.Close()
	model := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		switch r.N {
		case 1:
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "b1", Name: "ask_builder", Arguments: `{"message": "slow nightly build", "background": true}`}}}
		case 2:
			return fakemodel.Step{Text: "started it"}
		case 3:
			key := regexp.MustCompile(`key "([^"]+)"`).FindStringSubmatch(toolResults(r)["b1"].Text)
			if key == nil {
				return fakemodel.Step{Text: "no key"}
			}
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "g1", Name: "get_from_working_memory", Arguments: fmt.Sprintf(`{"key": %q}`, key[1])}}}
		default:
			return fakemodel.Step{Text: "noted"}
		}
	})
	defer model.Close()
	reg := grain.NewRegistry()
	registerCounter(t, reg, nil, nil)
	def := definition(llm.ProviderOpenAI, model.OpenAIURL())
	def.Tools = []llm.ToolRef{{A2A: "builder"}}
	if err := llm.Register(reg, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	s := startToolSilo(t, reg, `{"Rules": []}`)
	ctx := t.Context()
	if _, err := s.Directory().Add(ctx, directory.Spec{Name: "builder", Kind: grain.KindA2A, URL: out.URL}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the directory fetched the builder's card", func() bool {
		b, err := s.Directory().Get(ctx, "builder")
		return err == nil && !b.LastSeen.IsZero()
	})
	alice := dialAs(t, s, "alice")
	if r, err := alice.Ask(ctx, "Helper:alice:h", &client.Message{Message: "start the nightly build"}); err != nil || r.Message != "started it" {
		t.Fatalf("the turn that starts it: %v %v", r, err)
	}
	if res := toolResults(model.Requests()[1])["b1"]; res.IsError || !strings.Contains(res.Text, "in the background") {
		t.Fatalf("the background call's result: %+v", res)
	}
	out.Release()
	testutil.WaitFor(t, "the background answer's turn", func() bool {
		c := conversation(t, alice, "Helper:alice:h")
		return len(c.Turns) == 2
	})
	c := conversation(t, alice, "Helper:alice:h")
	bg := c.Turns[1]
	if bg.Trigger != llm.TriggerBackground || bg.Error != "" || bg.Rounds != 2 {
		t.Fatalf("the background turn: %+v", bg)
	}
	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	if u := reqs[2].LastMessage(); u.Role != "user" || !strings.Contains(u.Text, "[background answer]") || !strings.Contains(u.Text, "done: nightly build") {
		t.Fatalf("the synthetic user message: %+v", u)
	}
	if g := toolResults(reqs[3])["g1"]; g.IsError || !strings.Contains(g.Text, "done: nightly build") {
		t.Fatalf("get_from_working_memory: %+v", g)
	}
}

// Trust levels of an outside A2A agent. At observe, every call a model
// agent makes to it waits for a person's approval, and its own requests
// to the cluster's agents are refused whatever the ACL grants; at act
// with approved skills, a call naming one runs at once and any other
// waits; at act, its requests pass the ACL as any principal's.
func TestOutsideTrustLevels(t *testing.T) {
	out := outside.Start(true)
	defer out.Close()
	model := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		last := r.LastMessage()
		switch {
		case last.Role == "tool":
			return fakemodel.Step{Text: "result: " + last.Text}
		case last.Text == "build":
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "b1", Name: "ask_builder", Arguments: `{"message": "release 2", "skill": "build"}`}}}
		default:
			return fakemodel.Step{ToolCalls: []fakemodel.ToolCall{{ID: "d1", Name: "ask_builder", Arguments: `{"message": "release 2", "skill": "deploy"}`}}}
		}
	})
	defer model.Close()
	reg := grain.NewRegistry()
	registerCounter(t, reg, nil, nil)
	def := definition(llm.ProviderOpenAI, model.OpenAIURL())
	def.Tools = []llm.ToolRef{{A2A: "builder"}}
	if err := llm.Register(reg, def, llm.WithGetenv(getenv), llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	s := startToolSilo(t, reg, `{"Rules": [
		{"OwnerPattern": "system", "AgentPattern": "directory", "CallerPattern": "alice", "Permission": "Read"},
		{"OwnerPattern": "alice", "AgentPattern": "*", "CallerPattern": "builder-bot", "Permission": "Message"}
	]}`)
	ctx := t.Context()
	add := func(sp directory.Spec) {
		t.Helper()
		sp.Name, sp.Kind, sp.URL, sp.Principal = "builder", grain.KindA2A, out.URL, "builder-bot"
		if _, err := s.Directory().Add(ctx, sp); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the directory to index the builder at "+sp.Trust, func() bool {
			b, err := s.Directory().Get(ctx, "builder")
			_, observed := s.Directory().Observed("builder-bot")
			return err == nil && !b.LastSeen.IsZero() && b.Trust == cmp.Or(sp.Trust, grain.TrustAct) && observed == (sp.Trust == grain.TrustObserve)
		})
	}
	alice, bot := dialAs(t, s, "alice"), dialAs(t, s, "builder-bot")
	ask := func(alias, text string) *client.Message {
		t.Helper()
		r, err := alice.Ask(ctx, "Helper:alice:"+alias, &client.Message{Message: text})
		if err != nil {
			t.Fatalf("%s %q: %v", alias, text, err)
		}
		return r
	}

	// Observe: a call waits; the outside agent asks no agent of alice's.
	add(directory.Spec{Trust: grain.TrustObserve})
	if r := ask("o1", "build"); r.MessageType != llm.InputRequired || out.Sends() != 0 {
		t.Fatalf("at observe: %s %q, %d sends; want the call waiting for approval", r.MessageType, r.Message, out.Sends())
	}
	_, err := bot.Ask(ctx, "Counter:alice:c", &client.Message{Message: "total?"})
	if errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "trust level observe") {
		t.Fatalf("the outside agent's request at observe: %v, want PermissionDenied naming its trust level", err)
	}

	// Act with an approved skill: build runs, deploy waits; the outside
	// agent's requests pass the ACL.
	add(directory.Spec{Trust: grain.TrustAct, ApprovedSkills: []string{"build"}})
	if r := ask("a1", "build"); r.MessageType == llm.InputRequired || !strings.HasPrefix(r.Message, "result: ") || out.Sends() != 1 {
		t.Fatalf("an approved skill at act: %s %q, %d sends; want it run", r.MessageType, r.Message, out.Sends())
	}
	if r := ask("a2", "deploy"); r.MessageType != llm.InputRequired || out.Sends() != 1 {
		t.Fatalf("another skill at act: %s %q, %d sends; want it waiting", r.MessageType, r.Message, out.Sends())
	}
	if r, err := bot.Ask(ctx, "Counter:alice:c", &client.Message{Message: "total?"}); err != nil || r.Message != "0" {
		t.Fatalf("the outside agent's request at act: %v %v", r, err)
	}
}
