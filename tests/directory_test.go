package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/directory/directorytest"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// finder is an agent that finds who can do a task and has it done: it
// searches the directory for its message's text, takes the best hit and
// asks it (by the address the directory says calls it) the question in
// its state's "ask", replying "<entry>: <answer>".
type finder struct{ h grain.Host }

func (f finder) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	hits, err := f.h.Directory().Search(ctx, grain.DirectoryQuery{Text: m.Message, Kind: m.State["kind"], Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(hits) == 0 {
		return nil, errs.New(codes.NotFound, "nobody can %q", m.Message)
	}
	e := hits[0].Entry
	to := strings.NewReplacer("{owner}", f.h.Owner(), "{alias}", "found").Replace(e.Call)
	q := &grain.Message{Message: m.State["ask"]}
	if e.Kind == grain.KindMCP && len(e.Tools) > 0 {
		q.MessageType, q.Data, q.DataType = e.Tools[0].Name, []byte(m.State["ask"]), "application/json"
		q.Message = ""
	}
	a, err := f.h.Ask(ctx, to, q)
	if err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = e.Name + ": " + a.Message
	return r, nil
}

// reply is an agent type that answers with prefix and the text it got.
func reply(prefix string) grain.Factory {
	return func(grain.Host) (grain.Agent, error) {
		return replier(prefix), nil
	}
}

type replier string

func (p replier) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = string(p) + m.Message
	return r, nil
}

func dirSilo(t *testing.T, e *etcdtest.Server, name, prefix string, reg *grain.Registry, configure func(*cluster.SiloConfig)) *cluster.Silo {
	t.Helper()
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testutil.Logger()
	cfg.A2A.Addr = "127.0.0.1:0"
	cfg.A2A.AllowPrivateNetworks = true // the outside peers are on loopback
	cfg.MCP.AllowPrivateNetworks = true // the MCP one too, which MCP agents call
	cfg.DirectoryRefresh = time.Second
	if configure != nil {
		configure(&cfg)
	}
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// One directory over a two-silo cluster: a local type, an outside A2A
// agent on the a2a-go SDK, another cluster's A2A endpoint (behind an API
// key) and an MCP server on the Go SDK. An agent searches it and calls
// what it found by the directory's name; the outside entries are in the
// A2A listing; a peer that goes down stays listed with its error; only
// administrators change it, and credentials never come back.
func TestDirectory(t *testing.T) {
	e := etcdtest.Start(t)
	weather := directorytest.StartA2A(t)
	files := directorytest.StartMCP(t)

	// Another cluster, whose Translator is reached through its A2A
	// endpoint with carol's API key.
	sum := sha256.Sum256([]byte("carol-key"))
	other := grain.NewRegistry()
	if err := other.Register("Translator", reply("fr: "), grain.TypeInfo{Description: "Translates text into French.",
		Skills: []grain.Skill{{Name: "translate", Tags: []string{"language"}, Examples: []string{"translate good morning into French"}}}}); err != nil {
		t.Fatal(err)
	}
	remote := dirSilo(t, e, "remote", "/remote/", other, func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: hex.EncodeToString(sum[:]), Principal: "carol"}}
	})

	regs := [2]*grain.Registry{grain.NewRegistry(), grain.NewRegistry()}
	for _, reg := range regs {
		if err := reg.Register("Finder", func(h grain.Host) (grain.Agent, error) { return finder{h}, nil },
			grain.TypeInfo{Description: "Finds who can do a task, and has it done."}); err != nil {
			t.Fatal(err)
		}
	}
	for _, reg := range regs {
		if err := reg.Register("Summarizer", reply("summary: "), grain.TypeInfo{Description: "Summarizes long documents into a few sentences.",
			Skills: []grain.Skill{{Name: "summarize", Tags: []string{"text"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Archivist lives on the second silo only: the types of every silo are listed.
	if err := regs[1].Register("Archivist", reply(""), grain.TypeInfo{Description: "Keeps records."}); err != nil {
		t.Fatal(err)
	}
	s1 := dirSilo(t, e, "s1", "/dir/", regs[0], func(c *cluster.SiloConfig) { c.MCP.Addr = "127.0.0.1:0" })
	s2 := dirSilo(t, e, "s2", "/dir/", regs[1], nil)

	admin, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("system"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, req := range []client.OutsideEntry{
		{Name: "weather", Kind: "a2a", URL: weather.URL, Headers: map[string]string{"Authorization": "Bearer w-token"}},
		{Name: "translator", Kind: "a2a", URL: "http://" + remote.A2AAddr() + "/a2a/Translator/carol/t", Headers: map[string]string{"X-Api-Key": "carol-key"}},
		{Name: "files", Kind: "mcp", URL: files.URL},
	} {
		if _, err := admin.Directory().Add(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	// The other silo lists them too, refreshed (by one of the two silos).
	reader, err := client.Dial(t.Context(), []string{s2.GatewayAddr()}, client.WithPrincipal("system"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	testutil.WaitFor(t, "the outside entries fetched, and Archivist from s2 listed on s1", func() bool {
		lPage, err := reader.Directory().List(t.Context(), client.DirectoryQuery{})
		l := lPage.Items
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, e := range l {
			seen[e.Name] = e.Kind == "type" || (!e.LastSeen.IsZero() && (len(e.Skills) > 0 || len(e.Tools) > 0))
		}
		typesPage, err := admin.Directory().List(t.Context(), client.DirectoryQuery{Kind: "type"})
		types := typesPage.Items
		s1Sum := false
		for _, e := range types {
			s1Sum = s1Sum || e.Name == "Archivist"
		}
		return err == nil && s1Sum && seen["weather"] && seen["translator"] && seen["files"] && seen["Summarizer"]
	})
	if weather.LastAuth() != "Bearer w-token" {
		t.Errorf("weather got Authorization %q", weather.LastAuth())
	}

	// One search finds each by what it does; no reader gets a header.
	for query, want := range map[string]string{
		"weather forecast for a city":  "a2a/weather",
		"translate into French":        "a2a/translator",
		"read a file from the archive": "mcp/files",
		"summarize a long document":    "type/Summarizer",
	} {
		hits, err := reader.Directory().Search(t.Context(), query, client.DirectoryQuery{}, client.Limit(3))
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].Entry.Kind+"/"+hits[0].Entry.Name != want {
			t.Errorf("search %q: %v, want %s first", query, hits, want)
		}
		b, _ := json.Marshal(hits)
		if strings.Contains(string(b), "w-token") || strings.Contains(string(b), "carol-key") {
			t.Errorf("a credential in search results: %s", b)
		}
	}

	// Bad input gets its code through gRPC.
	if _, err := reader.Directory().Search(t.Context(), "x", client.DirectoryQuery{Kind: "agents"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("search of kind agents: %v", err)
	}
	if _, err := admin.Directory().Add(t.Context(), client.OutsideEntry{Name: "bad", Kind: "a2a", URL: "file:///etc/passwd"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("add of a file URL: %v", err)
	}
	if err := admin.Directory().Remove(t.Context(), "nobody"); status.Code(err) != codes.NotFound {
		t.Errorf("remove of nobody: %v", err)
	}

	// An agent searches, then calls what it found by its directory name,
	// with no configuration of its own.
	ask := func(what, question string) string {
		t.Helper()
		r, err := reader.Ask(t.Context(), "Finder:system:f", &client.Message{Message: what, State: map[string]string{"ask": question}})
		if err != nil {
			t.Fatalf("Finder %q: %v", what, err)
		}
		return r.Message
	}
	if got := ask("weather forecast", "Lisbon"); got != "weather: forecast for Lisbon: sunny" {
		t.Errorf("weather: %q", got)
	}
	if got := ask("translate into French", "good morning"); got != "translator: fr: good morning" {
		t.Errorf("translator: %q", got)
	}
	if got := ask("summarize a long document", "a long text"); got != "Summarizer: summary: a long text" {
		t.Errorf("summarizer: %q", got)
	}
	if got := ask("read a file from the archive", `{"path":"notes.txt"}`); got != "files: contents of notes.txt" {
		t.Errorf("files: %q", got)
	}

	// An MCP client finds them with the directory's tools.
	mc := dirMCP(t, s1, "system")
	var searched struct {
		Results []struct{ Name, Kind, Call string }
	}
	dirTool(t, mc, "search_known_services", map[string]any{"query": "read a file from the archive"}, &searched)
	if len(searched.Results) == 0 || searched.Results[0].Name != "files" || searched.Results[0].Call != "MCP:{owner}:files" {
		t.Errorf("search_known_services: %+v", searched)
	}
	var agents struct{ Agents []struct{ Name, Kind string } }
	dirTool(t, mc, "list_known_agents", map[string]any{"skill": "language"}, &agents)
	if len(agents.Agents) != 1 || agents.Agents[0].Name != "translator" {
		t.Errorf("list_known_agents language: %+v", agents)
	}
	var details struct {
		Name, URL string
		Skills    []struct {
			Name     string
			Examples []string
		}
	}
	dirTool(t, mc, "get_agent_details", map[string]any{"name": "weather"}, &details)
	if details.URL != weather.URL || len(details.Skills) != 1 || details.Skills[0].Examples[0] != "will it rain in Lisbon tomorrow" {
		t.Errorf("get_agent_details weather: %+v", details)
	}

	// The outside agents are in the A2A listing and the root card.
	var listing struct {
		Outside []struct {
			Name, Call string
			Skills     []struct{ Name string }
		} `json:"outside"`
	}
	getJSON(t, "http://"+s1.A2AAddr()+"/a2a?skill=weather", &listing)
	if len(listing.Outside) != 1 || listing.Outside[0].Name != "weather" || listing.Outside[0].Call != "A2A:{owner}:weather" || listing.Outside[0].Skills[0].Name != "forecast" {
		t.Errorf("GET /a2a?skill=weather: %+v", listing)
	}
	var card struct{ Skills []struct{ ID string } }
	getJSON(t, "http://"+s1.A2AAddr()+"/.well-known/agent-card.json", &card)
	found := false
	for _, sk := range card.Skills {
		found = found || sk.ID == "outside/weather/forecast"
	}
	if !found {
		t.Errorf("root card skills: %+v", card.Skills)
	}

	// Access: reading needs Read on system:directory (while the ACL has
	// no rules its seed rule grants everyone Read on system's agents),
	// changing it Admin.
	if _, err := admin.ACL().AddRule(t.Context(), client.ACLRule{OwnerPattern: "system", AgentPattern: "directory", CallerPattern: "alice", Permission: "Read"}); err != nil {
		t.Fatal(err)
	}
	alice, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if hits, err := alice.Directory().Search(t.Context(), "weather", client.DirectoryQuery{}); err != nil || len(hits) == 0 {
		t.Errorf("alice searches: %v %v", hits, err)
	}
	if err := alice.Directory().Remove(t.Context(), "weather"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice removes: %v", err)
	}
	dev, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.Directory().Search(t.Context(), "weather", client.DirectoryQuery{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("dev searches: %v", err)
	}
	if _, err := dev.Directory().Add(t.Context(), client.OutsideEntry{Name: "evil", Kind: "a2a", URL: "http://127.0.0.1:1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("dev adds: %v", err)
	}
	if _, err := dev.Ask(t.Context(), "Finder:dev:f", &client.Message{Message: "weather", State: map[string]string{"ask": "x"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("dev's agent searches on dev's behalf: %v", err)
	}

	res, err := dirMCP(t, s1, "dev").CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "search_known_services", Arguments: map[string]any{"query": "weather"}})
	if err != nil || !res.IsError {
		t.Errorf("dev's search_known_services: %v %+v", err, res)
	}

	// The peer goes down: still listed, with its error and last-seen time.
	weather.Stop()
	testutil.WaitFor(t, "weather's failed refresh", func() bool {
		e, err := reader.Directory().Get(t.Context(), "weather")
		return err == nil && e.LastError != "" && !e.LastSeen.IsZero()
	})
	if hits, err := reader.Directory().Search(t.Context(), "weather forecast", client.DirectoryQuery{}); err != nil || len(hits) == 0 || hits[0].Entry.Name != "weather" {
		t.Errorf("a peer that is down: %v %v", hits, err)
	}

	if err := admin.Directory().Remove(t.Context(), "weather"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Directory().Get(t.Context(), "weather"); status.Code(err) != codes.NotFound {
		t.Errorf("after remove: %v", err)
	}

	// A type goes with the last silo that hosts it.
	if err := s2.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "Archivist gone with s2", func() bool {
		_, err := admin.Directory().Get(t.Context(), "Archivist")
		return status.Code(err) == codes.NotFound
	})
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// dirMCP connects an MCP client (the Go SDK's) to the silo's every-agent
// endpoint as principal.
func dirMCP(t *testing.T, s *cluster.Silo, principal string) *mcpsdk.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "directory-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{
		Endpoint:             "http://" + s.MCPAddr() + "/mcp",
		HTTPClient:           &http.Client{Transport: dirHeader{tr, principal}},
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type dirHeader struct {
	base      http.RoundTripper
	principal string
}

func (h dirHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("x-agentsilo-principal", h.principal)
	return h.base.RoundTrip(r)
}

// dirTool calls a tool and decodes its structured content into out.
func dirTool(t *testing.T, cs *mcpsdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: error result %+v", name, res.Content)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v in %s", name, err, b)
	}
}

// The agent of docs/directory.md is the finder that TestDirectory runs.
func TestDirectoryDocAgent(t *testing.T) {
	doc := strings.TrimSpace(testutil.DocBlock(t, "docs/directory.md", "directory:agent"))
	src, err := os.ReadFile("directory_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), doc) {
		t.Errorf("docs/directory.md's agent is not the finder of tests/directory_test.go:\n%s", doc)
	}
}

// The directory's MCP tools from the official TypeScript SDK
// (tests/mcpjs/directory.mjs).
func TestDirectoryMCPFromTypeScript(t *testing.T) {
	dir := mcpJS(t)
	e := etcdtest.Start(t)
	weather := directorytest.StartA2A(t)
	files := directorytest.StartMCP(t)
	s := dirSilo(t, e, "ts", "/dirts/", grain.NewRegistry(), func(c *cluster.SiloConfig) { c.MCP.Addr = "127.0.0.1:0" })
	d := s.Directory()
	if _, err := d.Add(t.Context(), directory.Spec{Name: "weather", Kind: grain.KindA2A, URL: weather.URL, Headers: map[string]string{"Authorization": "Bearer w-token"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Add(t.Context(), directory.Spec{Name: "files", Kind: grain.KindMCP, URL: files.URL}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both entries refreshed", func() bool {
		w, err1 := d.Get(t.Context(), "weather")
		f, err2 := d.Get(t.Context(), "files")
		return err1 == nil && err2 == nil && len(w.Skills) == 1 && len(f.Tools) == 1
	})
	cmd := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "directory.mjs"), "http://"+s.MCPAddr()+"/mcp", "dev")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node directory.mjs: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "ok "); n != 10 {
		t.Errorf("%d checks passed, want 10:\n%s", n, out)
	}
}
