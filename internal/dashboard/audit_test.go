package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestAuditPage: three model agents' tool calls are recorded (two for
// carol, one for alice). In a real browser alice, whom the ACL grants
// Audit on system:audit, reads them newest first, two a page, pages to
// the older one and back, filters by agent and by principal, and verifies
// the chains; after a record is changed in etcd, Verify names it. carol,
// who lacks Audit, has no Audit menu entry and gets the service's
// refusal.
func TestAuditPage(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	aliceKey, aliceAPI := apiKey("alice")
	carolKey, carolAPI := apiKey("carol")
	ctx := t.Context()

	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Tally_add", Arguments: `{"agent": "t", "input": {"n": 1}}`}.Respond)
	t.Cleanup(srv.Close)
	reg := grain.NewRegistry()
	type addIn struct {
		N int `json:"n"`
	}
	add := grain.TypedHandler(func(_ context.Context, in addIn) (int, error) { return in.N, nil })
	must(t, reg.Register("Tally", func(grain.Host) (grain.Agent, error) { return gateAgent{add}, nil },
		grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[addIn, int]("add", "Adds n.")}}))
	must(t, llm.Register(reg, llm.Definition{
		Type:  "Adder",
		Model: llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-model"},
		Tools: []llm.ToolRef{{Agent: "Tally"}},
	}, llm.WithMaxRetries(0)))

	aclFile := filepath.Join(t.TempDir(), "acl.json")
	must(t, os.WriteFile(aclFile, []byte(`{"Rules": [{"OwnerPattern": "system", "AgentPattern": "audit", "CallerPattern": "alice", "Permission": "Audit"}]}`), 0o600))
	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "a0"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/audit-page/"}
	cfg.Logger = testutil.Logger()
	cfg.ACLFile = aclFile
	cfg.Gateway.Auth.Keys = []auth.APIKey{aliceAPI, carolAPI}
	cfg.LLM.AllowPrivateNetworks = true // the fake model is on loopback
	s, err := cluster.NewSilo(cfg, reg)
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { s.Close(context.Background()) })
	base := "http://" + s.HTTPAddr()

	// One tool call each, in this order: carol's c1 and c2, alice's a1.
	for _, who := range []struct{ key, agent string }{{carolKey, "Adder:carol:c1"}, {carolKey, "Adder:carol:c2"}, {aliceKey, "Adder:alice:a1"}} {
		c, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithAPIKey(who.key))
		must(t, err)
		_, err = c.Ask(ctx, who.agent, &client.Message{Message: "add one"})
		c.Close()
		must(t, err)
	}

	// carol may not read the audit: no menu entry, and the refusal.
	carol := login(t, base, carolKey)
	if page := carol("/ui/audit"); !strings.Contains(page, "PermissionDenied") || strings.Contains(page, "Adder:") || strings.Contains(page, `href="/ui/audit"`) {
		t.Fatalf("carol's audit page:\n%s", page)
	}
	if page := carol("/ui/"); strings.Contains(page, `href="/ui/audit"`) {
		t.Fatalf("carol's menu offers the audit:\n%s", page)
	}

	b, stop := browsertest.New(t, ctx, chromium, 1400, 900)
	defer stop()
	agents := func() []string {
		t.Helper()
		var out []string
		b.RunT("read the agents", func(ctx context.Context) (err error) {
			out, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#audit tr.record td.name")].map(e => e.innerText)`))
			return err
		})
		return out
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: the page lists %q, want %q; it reads:\n%s", what, got, want, b.Text("main"))
		}
	}
	// loaded waits for the page of filter (agent|principal|since|newest
	// or older).
	loaded := func(filter string) {
		t.Helper()
		b.Run("wait for "+filter, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#audit-count[data-filter=%q]`, filter))))
	}
	b.Run("log in", chromedp.Navigate(base+"/ui/audit?n=2"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), aliceKey), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("audit")))
	if !strings.Contains(b.Text("nav"), "Audit") {
		t.Fatalf("alice's menu lacks Audit: %q", b.Text("nav"))
	}
	want("the first page", agents(), "Adder:alice:a1", "Adder:carol:c2")
	if table := b.Text("#audit"); !strings.Contains(table, "tool_call") || !strings.Contains(table, "Tally_add") || !strings.Contains(table, "carol") {
		t.Fatalf("the audit table:\n%s", table)
	}
	b.Run("older", chromedp.Click(chromedp.ID("older")))
	loaded("|||older")
	want("the second page", agents(), "Adder:carol:c1")
	b.Run("newest", chromedp.Click(chromedp.ID("newest")))
	loaded("|||newest")
	want("the first page again", agents(), "Adder:alice:a1", "Adder:carol:c2")

	b.Run("filter by agent", chromedp.SendKeys(chromedp.ID("agent"), "Adder:carol:c1"), chromedp.Click(chromedp.ID("show")))
	loaded("Adder:carol:c1|||newest")
	want("agent Adder:carol:c1", agents(), "Adder:carol:c1")
	b.Run("filter by principal", chromedp.Navigate(base+"/ui/audit"), chromedp.WaitVisible(chromedp.ID("principal")),
		chromedp.SendKeys(chromedp.ID("principal"), "carol"), chromedp.SendKeys(chromedp.ID("since"), "1h"),
		chromedp.Click(chromedp.ID("show")))
	loaded("|carol|1h|newest")
	want("principal carol", agents(), "Adder:carol:c2", "Adder:carol:c1")

	waitFlash := func(want string) string {
		t.Helper()
		b.RunT("wait for the flash to say "+want, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector("#flash")||{}).innerText?.includes(%q)`, want), chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
		return b.Text("#flash")
	}
	ready := func() {
		t.Helper()
		b.RunT("wait for htmx", func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && !!window.htmx`, chromedp.WithPollingInterval(50*time.Millisecond)))
			return err
		})
	}
	ready() // else the click posts the form as a plain one
	b.Run("verify", chromedp.Click(chromedp.ID("verify")))
	waitFlash("Verified: 3 records")

	// Change carol's c1 record in etcd behind the log's back.
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
	must(t, err)
	defer ec.Close()
	resp, err := ec.Get(ctx, "/audit-page/audit/rec/", clientv3.WithPrefix())
	must(t, err)
	changed := ""
	for _, kv := range resp.Kvs {
		var rec map[string]any
		must(t, json.Unmarshal(kv.Value, &rec))
		if rec["agent"] == "Adder:carol:c1" {
			rec["skill"] = "Payments_send"
			v, _ := json.Marshal(rec)
			_, err := ec.Put(ctx, string(kv.Key), string(v))
			must(t, err)
			changed = fmt.Sprintf("record %v of partition %v", rec["seq"], rec["partition"])
		}
	}
	if changed == "" {
		t.Fatal("no record of Adder:carol:c1 in etcd")
	}
	b.Run("verify again", chromedp.Click(chromedp.ID("verify")))
	if got := waitFlash("do not match"); !strings.Contains(got, changed) || !strings.Contains(got, "it was changed") {
		t.Fatalf("verify after the change said %q, want it to name %s", got, changed)
	}
}
