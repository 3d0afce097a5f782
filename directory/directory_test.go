package directory_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/directory/directorytest"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

func startDir(t *testing.T, cfg directory.Config) *directory.Directory {
	t.Helper()
	cfg.Logger = testutil.Logger()
	d, err := directory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func get(t *testing.T, d *directory.Directory, name string) grain.DirectoryEntry {
	t.Helper()
	e, err := d.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Outside A2A agents and MCP servers are fetched by the silo that owns
// them, once per refresh; their headers reach them and no reader; one that
// goes down stays listed with its error and its last-seen time.
func TestOutsideEntries(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	agent := directorytest.StartA2A(t)
	tools := directorytest.StartMCP(t)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))

	types := []grain.TypeInfo{{Name: "Planner", Description: "Plans trips.", Skills: []grain.Skill{{Name: "plan", Tags: []string{"travel"}, Examples: []string{"plan a trip to Rome"}}}}}
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix = cli, "/t/"
	clock.Wire(&cfg, clk)
	cfg.Types = func(context.Context) ([]grain.TypeInfo, error) { return types, nil }
	owner := startDir(t, cfg)
	cfg.Owns = func(string) bool { return false }
	other := startDir(t, cfg)

	if _, err := owner.Add(t.Context(), directory.Spec{Name: "weather", Kind: grain.KindA2A, URL: agent.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Add(t.Context(), directory.Spec{Name: "files", Kind: grain.KindMCP, URL: tools.URL,
		Skills: []grain.Skill{{Name: "archive", Description: "The shared document archive.", Tags: []string{"documents"}}}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*directory.Directory{owner, other} {
		testutil.WaitFor(t, "the card and the tools fetched, seen by both silos", func() bool {
			w, err1 := d.Get(t.Context(), "weather")
			f, err2 := d.Get(t.Context(), "files")
			return err1 == nil && err2 == nil && !w.LastSeen.IsZero() && len(w.Skills) == 1 && !f.LastSeen.IsZero() && len(f.Tools) == 1
		})
	}
	w := get(t, other, "weather")
	if w.Description != "Weather reports from an outside agent." || w.Skills[0].Name != "forecast" || w.Call != "A2A:{owner}:weather" || w.LastError != "" || !w.LastSeen.Equal(clk.Now()) {
		t.Fatalf("weather: %+v", w)
	}
	if got := agent.LastAuth(); got != "Bearer s3cret" {
		t.Fatalf("the agent got Authorization %q", got)
	}
	f := get(t, other, "files")
	if f.Tools[0].Name != "read_file" || f.Call != "MCP:{owner}:files" || len(f.Skills) != 1 || f.Skills[0].Name != "archive" {
		t.Fatalf("files: %+v", f)
	}
	url, headers, ok, err := other.Resolve(t.Context(), grain.KindA2A, "weather")
	if err != nil || !ok || url != agent.URL || headers["Authorization"] != "Bearer s3cret" {
		t.Fatalf("Resolve: %q %v %v %v", url, headers, ok, err)
	}
	if _, _, ok, _ := other.Resolve(t.Context(), grain.KindMCP, "weather"); ok {
		t.Fatal("Resolve found weather as an MCP server")
	}

	// One search over the three kinds, by what they do.
	for query, want := range map[string]string{
		"will it rain tomorrow":     "a2a/weather",
		"read a file from archive":  "mcp/files",
		"trip planning":             "type/Planner",
		"forecast weather for city": "a2a/weather",
	} {
		hits, err := other.Search(t.Context(), grain.DirectoryQuery{Text: query})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].Entry.Kind+"/"+hits[0].Entry.Name != want || hits[0].Score <= 0 {
			t.Errorf("search %q: %v, want %s first", query, names(hits), want)
		}
	}
	if hits, _ := other.Search(t.Context(), grain.DirectoryQuery{Text: "weather", Kind: grain.KindMCP}); len(hits) != 0 {
		t.Errorf("kind mcp: %v", names(hits))
	}
	if l, _ := other.List(t.Context(), grain.DirectoryQuery{Tag: "read_file"}); len(l) != 1 || l[0].Name != "files" {
		t.Errorf("list by tool: %v", l)
	}
	if l, _ := other.List(t.Context(), grain.DirectoryQuery{}); len(l) != 3 || l[0].Name != "Planner" || l[1].Name != "weather" || l[2].Name != "files" {
		t.Errorf("list: %v", l)
	}

	// Only the owner asks, once per refresh (within its jitter).
	n := agent.Requests()
	clk.Advance(cfg.Refresh + cfg.Refresh/10)
	testutil.WaitFor(t, "the second refresh", func() bool { return get(t, other, "weather").LastSeen.Equal(clk.Now()) })
	if got := agent.Requests() - n; got != 1 {
		t.Errorf("%d card requests in one refresh, want 1 (one silo)", got)
	}

	// The agent goes down: listed still, with its error and last-seen.
	seen := clk.Now()
	agent.Stop()
	clk.Advance(cfg.Refresh + cfg.Refresh/10)
	testutil.WaitFor(t, "the failed refresh", func() bool { return get(t, other, "weather").LastError != "" })
	w = get(t, other, "weather")
	if !w.LastSeen.Equal(seen) || len(w.Skills) != 1 || !strings.Contains(w.LastError, "connect") {
		t.Errorf("after going down: %+v", w)
	}
	if hits, _ := other.Search(t.Context(), grain.DirectoryQuery{Text: "forecast"}); len(hits) != 1 {
		t.Errorf("a peer that is down is not found: %v", names(hits))
	}

	// Types come and go with the silos.
	types = nil // the test's Types is read by the directories' loops after the clock moves
	clk.Advance(cfg.TypesEvery)
	testutil.WaitFor(t, "Planner gone", func() bool { _, err := other.Get(t.Context(), "Planner"); return status.Code(err) == codes.NotFound })

	if err := owner.Remove(t.Context(), "weather"); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Get(t.Context(), "weather"); status.Code(err) != codes.NotFound {
		t.Fatalf("after Remove: %v", err)
	}
	if err := owner.Remove(t.Context(), "weather"); status.Code(err) != codes.NotFound {
		t.Fatalf("Remove again: %v", err)
	}
}

func names(hits []grain.DirectoryHit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Entry.Kind+"/"+h.Entry.Name)
	}
	return out
}

// When the view moves an entry to another silo, that silo refreshes it
// when it is due, and the first one no longer does.
func TestRefreshMovesWithOwner(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	agent := directorytest.StartA2A(t)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	var aOwns atomic.Bool
	aOwns.Store(true)
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix = cli, "/t/"
	clock.Wire(&cfg, clk)
	cfg.Owns = func(string) bool { return aOwns.Load() }
	a := startDir(t, cfg)
	cfg.Owns = func(string) bool { return !aOwns.Load() }
	b := startDir(t, cfg)
	if _, err := a.Add(t.Context(), directory.Spec{Name: "weather", Kind: grain.KindA2A, URL: agent.URL}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the first refresh, seen by b", func() bool {
		e, err := b.Get(t.Context(), "weather")
		return err == nil && e.LastSeen.Equal(clk.Now())
	})
	aOwns.Store(false)
	n := agent.Requests()
	clk.Advance(cfg.Refresh + cfg.Refresh/10)
	testutil.WaitFor(t, "b's refresh, seen by a", func() bool {
		e, err := a.Get(t.Context(), "weather")
		return err == nil && e.LastSeen.Equal(clk.Now())
	})
	if got := agent.Requests() - n; got != 1 {
		t.Errorf("%d card requests after the move, want 1", got)
	}
}

// ListPage pages through the entries by kind and name.
func TestListPage(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix = cli, "/t/"
	cfg.Types = func(context.Context) ([]grain.TypeInfo, error) {
		return []grain.TypeInfo{{Name: "A"}, {Name: "B"}, {Name: "C"}}, nil
	}
	d := startDir(t, cfg)
	if _, err := d.Add(t.Context(), directory.Spec{Name: "x", Kind: grain.KindMCP, URL: "https://x.example"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		l, next, err := d.ListPage(t.Context(), grain.DirectoryQuery{}, after, 3)
		if err != nil || pages > 2 {
			t.Fatalf("page %d: %v %v", pages, l, err)
		}
		for _, e := range l {
			got = append(got, e.Kind+"/"+e.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(got, []string{"type/A", "type/B", "type/C", "mcp/x"}) {
		t.Errorf("pages: %v", got)
	}
	for _, bad := range []struct {
		after string
		limit int
	}{{"nokind", 0}, {"", -1}, {"", 1001}} {
		if _, _, err := d.ListPage(t.Context(), grain.DirectoryQuery{}, bad.after, bad.limit); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestAddRefusesBadEntries(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix, cfg.MaxEntries = cli, "/t/", 1
	d := startDir(t, cfg)
	for _, s := range []directory.Spec{
		{Name: "", Kind: grain.KindA2A, URL: "https://x"},
		{Name: "a:b", Kind: grain.KindA2A, URL: "https://x"},
		{Name: "x", Kind: "type", URL: "https://x"},
		{Name: "x", Kind: grain.KindA2A, URL: "ftp://x"},
		{Name: "x", Kind: grain.KindA2A, URL: "https://user:pw@x"},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Headers: map[string]string{"Bad Name": "v"}},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Headers: map[string]string{"Authorization": "a\r\nX-Injected: 1"}},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Skills: []grain.Skill{{Name: "a"}, {Name: "a"}}},
		{Name: "x", Kind: grain.KindMCP, URL: "https://x", Skills: []grain.Skill{{Name: "pay", Sensitive: true}}},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Description: strings.Repeat("d", 5000)},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Trust: "trusted"},
		{Name: "x", Kind: grain.KindMCP, URL: "https://x", Trust: grain.TrustObserve},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Trust: grain.TrustObserve, ApprovedSkills: []string{"a"}},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", ApprovedSkills: []string{""}},
		{Name: "x", Kind: grain.KindA2A, URL: "https://x", Principal: "bad principal"},
	} {
		_, err := d.Add(t.Context(), s)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%+v: %v, want InvalidArgument", s, err)
		}
		if strings.Contains(err.Error(), "X-Injected") {
			t.Errorf("a header value is in the error: %v", err)
		}
	}
	if _, err := d.Add(t.Context(), directory.Spec{Name: "one", Kind: grain.KindA2A, URL: "https://one.example"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Add(t.Context(), directory.Spec{Name: "two", Kind: grain.KindA2A, URL: "https://two.example"}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("past MaxEntries: %v", err)
	}
	for _, q := range []grain.DirectoryQuery{{Kind: "agent"}, {Limit: -1}, {Limit: 5000}, {Text: strings.Repeat("x ", 3000)}} {
		if _, err := d.Search(t.Context(), q); status.Code(err) != codes.InvalidArgument {
			t.Errorf("search %+v: %v", q, err)
		}
	}
}

// The index ranks by BM25: rarer words weigh more, a name more than a
// description, and the filters keep what they say.
func TestSearchRanking(t *testing.T) {
	entries := []grain.DirectoryEntry{
		{Name: "Translator", Kind: grain.KindType, Description: "Translates text between languages."},
		{Name: "Summarizer", Kind: grain.KindType, Description: "Summarizes long text.", Skills: []grain.Skill{{Name: "summarize", Tags: []string{"text"}}}},
		{Name: "invoices", Kind: grain.KindMCP, Description: "Billing.", Tools: []grain.DirectoryTool{{Name: "create_invoice", Description: "Creates an invoice for a customer."}}},
	}
	hits := directory.SearchEntries(entries, grain.DirectoryQuery{Text: "translate this text"})
	if got := names(hits); !slices.Equal(got, []string{"type/Translator", "type/Summarizer"}) || hits[0].Score <= hits[1].Score {
		t.Errorf("translate: %v", got)
	}
	if got := names(directory.SearchEntries(entries, grain.DirectoryQuery{Text: "Invoices for customers"})); !slices.Equal(got, []string{"mcp/invoices"}) {
		t.Errorf("invoices (plurals): %v", got)
	}
	if got := names(directory.SearchEntries(entries, grain.DirectoryQuery{Text: "text", Tag: "TEXT"})); !slices.Equal(got, []string{"type/Summarizer"}) {
		t.Errorf("tag: %v", got)
	}
	if got := names(directory.SearchEntries(entries, grain.DirectoryQuery{Text: "the and of"})); len(got) != 3 {
		t.Errorf("stop words only match everything: %v", got)
	}
	if got := names(directory.SearchEntries(entries, grain.DirectoryQuery{Text: "text", Limit: 1})); len(got) != 1 {
		t.Errorf("limit: %v", got)
	}
}

// FuzzSearch: no query crashes the index or returns more than asked.
func FuzzSearch(f *testing.F) {
	for _, s := range []string{"", "weather", "WeatherAgent forecasts", "ünïcödé ñ", "a b c d e f", "\xff\xfe", "ies ss us"} {
		f.Add(s, "")
	}
	entries := []grain.DirectoryEntry{
		{Name: "WeatherAgent", Kind: grain.KindA2A, Description: "Forecasts.", Skills: []grain.Skill{{Name: "forecast", Tags: []string{"weather"}}}},
		{Name: "ünïcödé", Kind: grain.KindType, Description: "ñ ñ ñ"},
	}
	f.Fuzz(func(t *testing.T, text, tag string) {
		hits := directory.SearchEntries(entries, grain.DirectoryQuery{Text: text, Tag: tag, Limit: 1})
		if len(hits) > 1 {
			t.Fatalf("%d hits, limit 1", len(hits))
		}
	})
}
