package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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

// TestApprovalsPage: alice's model agents ask for a tool call that needs
// approval, and their turns park (their activations then end). In a real
// browser, alice's approvals page lists both; she approves one with other
// arguments and denies the other with a reason; each turn ends as she
// decided (the tool run once with her arguments, or not at all), and the
// page lists none. carol, who may not read alice's agents, sees none.
func TestApprovalsPage(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	aliceKey, aliceAPI := apiKey("alice")
	carolKey, carolAPI := apiKey("carol")
	ctx := t.Context()

	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Tally_add", Arguments: `{"agent": "t", "input": {"n": 1}}`}.Respond)
	t.Cleanup(srv.Close)
	var total atomic.Int64
	reg := grain.NewRegistry()
	type addIn struct {
		N int `json:"n"`
	}
	add := grain.TypedHandler(func(_ context.Context, in addIn) (int64, error) { return total.Add(int64(in.N)), nil })
	must(t, reg.Register("Tally", func(grain.Host) (grain.Agent, error) { return gateAgent{add}, nil },
		grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[addIn, int64]("add", "Adds n.")}}))
	must(t, llm.Register(reg, llm.Definition{
		Type:     "Careful",
		Model:    llm.Model{Provider: llm.ProviderOpenAI, BaseURL: srv.OpenAIURL(), Name: "fake-model"},
		Tools:    []llm.ToolRef{{Agent: "Tally"}},
		Approval: []string{"Tally_add"},
	}, llm.WithMaxRetries(0)))

	e := etcdtest.Start(t)
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "a0"
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/approvals-page/"}
	cfg.Logger = testutil.Logger()
	cfg.Gateway.Auth.Keys = []auth.APIKey{aliceAPI, carolAPI}
	cfg.LLM.AllowPrivateNetworks = true // the fake model is on loopback
	s, err := cluster.NewSilo(cfg, reg)
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { s.Close(context.Background()) })
	base := "http://" + s.HTTPAddr()
	alice, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithAPIKey(aliceKey))
	must(t, err)
	t.Cleanup(func() { alice.Close() })

	ids := map[string]string{}
	for _, alias := range []string{"c1", "c2"} {
		r, err := alice.Ask(ctx, "Careful:alice:"+alias, &client.Message{Message: "add one"})
		var req llm.ApprovalRequest
		if err != nil || r.MessageType != llm.InputRequired || json.Unmarshal(r.Data, &req) != nil || len(req.Approvals) != 1 {
			t.Fatalf("%s: %v %v, want an approval request", alias, r, err)
		}
		ids[alias] = req.Approvals[0].ID
		if _, err := alice.Agents().Deactivate(ctx, "Careful:alice:"+alias); err != nil {
			t.Fatal(err)
		}
	}

	// carol may not read alice's agents: she sees none of them waiting.
	carol := login(t, base, carolKey)
	if page := carol("/ui/approvals?owner=alice"); !strings.Contains(page, "0 waiting") || strings.Contains(page, "Careful:alice") {
		t.Fatalf("carol's view of alice's approvals:\n%s", page)
	}

	b, stop := browsertest.New(t, ctx, chromium, 1400, 900)
	defer stop()
	b.Run("log in", chromedp.Navigate(base+"/ui/approvals"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), aliceKey), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("approvals")))
	table := b.Text("#approvals")
	for _, id := range ids {
		if !strings.Contains(table, id) {
			t.Fatalf("the approvals page lacks %s:\n%s", id, table)
		}
	}
	if !strings.Contains(table, "Tally_add") || !strings.Contains(b.Text("#approvals-count"), "2 waiting") {
		t.Fatalf("the approvals page:\n%s\n%s", b.Text("#approvals-count"), table)
	}
	row := func(id string) string { return fmt.Sprintf(`//tr[td[1][normalize-space()=%q]]`, id) }
	waitFlash := func(want string) {
		t.Helper()
		b.RunT("wait for the flash to say "+want, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector("#flash")||{}).innerText?.includes(%q)`, want), chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}
	b.Run("approve c1 with other arguments",
		chromedp.SendKeys(row(ids["c1"])+`//form[contains(@class,"approve")]//input[@name="args"]`, `{"agent": "t", "input": {"n": 5}}`),
		chromedp.Click(row(ids["c1"])+`//button[contains(@class,"approve")]`))
	waitFlash("Approved " + ids["c1"])
	b.Run("deny c2", chromedp.SendKeys(row(ids["c2"])+`//input[@name="reason"]`, "not today"),
		chromedp.Click(row(ids["c2"])+`//button[contains(@class,"deny")]`))
	waitFlash("Denied " + ids["c2"])

	ended := func(alias string) llm.Conversation {
		var c llm.Conversation
		testutil.WaitFor(t, alias+"'s turn to end", func() bool {
			var err error
			c, err = client.AskTyped[struct{}, llm.Conversation](ctx, alice, "Careful:alice:"+alias, llm.SkillConversation, struct{}{})
			return err == nil && c.Current == nil && len(c.Turns) == 1
		})
		return c
	}
	c1, c2 := ended("c1"), ended("c2")
	if total.Load() != 5 || len(c1.Decisions) != 1 || c1.Decisions[0].Decision != llm.Approved || c1.Decisions[0].By != "alice" || !strings.Contains(c1.Decisions[0].Call.Arguments, `"n":5`) {
		t.Fatalf("after approving c1 with n 5: total %d, decisions %+v", total.Load(), c1.Decisions)
	}
	if len(c2.Decisions) != 1 || c2.Decisions[0].Decision != llm.Denied || c2.Decisions[0].Reason != "not today" {
		t.Fatalf("after denying c2: %+v", c2.Decisions)
	}
	b.Run("refresh", chromedp.Click(chromedp.ID("refresh")), chromedp.WaitVisible(chromedp.ID("approvals")))
	if got := b.Text("#approvals-count"); !strings.Contains(got, "0 waiting") {
		t.Fatalf("after deciding both: %q", got)
	}
}
