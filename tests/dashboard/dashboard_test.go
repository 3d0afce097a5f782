// Package dashboard tests the silo's dashboard in a real browser: headless
// Chromium, driven by chromedp, against a three-silo cluster on an
// embedded etcd.
package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/chromedp/chromedp"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/a2a/a2atest"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/browsertest"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// The script the XSS test puts wherever the cluster lets a client put
// text: run, it would set window.__xss.
const xss = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">"'&`

// worker is the test's agent type: "remind" registers a reminder, "save
// TEXT" saves TEXT as its state, anything else is echoed.
type worker struct{ h grain.Host }

func (w worker) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	switch {
	case m.Message == "remind":
		if err := w.h.RegisterReminder(ctx, "tick", time.Hour, time.Hour, "tick", "ping"); err != nil {
			return nil, err
		}
	case strings.HasPrefix(m.Message, "save "):
		if _, err := w.h.SaveState(ctx, []byte(strings.TrimPrefix(m.Message, "save ")), ""); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = "ok " + m.Message
	return r, nil
}

// failer fails every message: what it is subscribed to ends as dead
// letters.
type failer struct{}

func (failer) OnMessage(context.Context, *grain.Message) (*grain.Message, error) {
	return nil, errors.New("failing on purpose")
}

func key(name string, groups ...string) (string, auth.APIKey) {
	k := name + "-key-0123456789"
	sum := sha256.Sum256([]byte(k))
	return k, auth.APIKey{SHA256: hex.EncodeToString(sum[:]), Principal: name, Groups: groups}
}

// TestDashboard starts three silos, fills the cluster as alice, then logs
// in with a browser as alice, root (an administrator) and bob (who may
// only read alice's agents), walks every page, checks each against what
// the SDK answers, takes every action, and is refused what bob may not
// do. Script put in configuration values and messages shows as text.
// DASHBOARD_SCREENSHOTS=dir saves each page as dir/NAME.png.
func TestDashboard(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	aliceKey, aliceAPI := key("alice")
	bobKey, bobAPI := key("bob")
	rootKey, rootAPI := key("root", "admins")
	start := time.Now()
	e := etcdtest.Start(t)

	reg := grain.NewRegistry()
	must(t, reg.Register("Worker", func(h grain.Host) (grain.Agent, error) { return worker{h}, nil }, grain.TypeInfo{Description: "Echoes."}))
	must(t, reg.Register("Failer", func(grain.Host) (grain.Agent, error) { return failer{}, nil }, grain.TypeInfo{}))
	must(t, a2atest.Register(reg))
	var silos []*cluster.Silo
	for i := range 3 {
		cfg := cluster.DefaultSiloConfig()
		cfg.Name = fmt.Sprintf("s%d", i)
		cfg.GatewayAddr = "127.0.0.1:0"
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/ui/"}
		cfg.Logger = testutil.Logger()
		cfg.Gateway.Auth.Keys = []auth.APIKey{aliceAPI, bobAPI, rootAPI}
		if i == 0 {
			cfg.A2A.Addr = "127.0.0.1:0"
			cfg.MCP.Addr = "127.0.0.1:0"
		}
		s, err := cluster.NewSilo(cfg, reg)
		must(t, err)
		must(t, s.Start(t.Context()))
		t.Cleanup(func() { s.Close(context.Background()) })
		silos = append(silos, s)
	}
	base := "http://" + silos[0].HTTPAddr()
	ctx := t.Context()
	dial := func(k string, silo int) *client.Client {
		c, err := client.Dial(ctx, []string{silos[silo].GatewayAddr()}, client.WithAPIKey(k))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	root, alice := dial(rootKey, 1), dial(aliceKey, 2)
	testutil.WaitFor(t, "three members", func() bool { m, err := root.Admin().Members(ctx); return err == nil && len(m) == 3 })

	// bob may read alice's agents; the seed's rule is kept for system's.
	_, err := root.ACL().AddRule(ctx, client.ACLRule{OwnerPattern: "alice", AgentPattern: "*", CallerPattern: "bob", Permission: "Read"})
	must(t, err)
	_, err = root.ACL().AddRule(ctx, client.ACLRule{OwnerPattern: "system", AgentPattern: "*", CallerPattern: "*", Permission: "Message,Read"})
	must(t, err)

	// alice's agents, a reminder on two, a state, a configuration with script.
	for i := range 6 {
		_, err := alice.Ask(ctx, fmt.Sprintf("Worker:alice:w%d", i), &client.Message{Message: "hello"})
		must(t, err)
	}
	for _, a := range []string{"Worker:alice:w1", "Worker:alice:w2"} {
		_, err := alice.Ask(ctx, a, &client.Message{Message: "remind"})
		must(t, err)
	}
	_, err = alice.Ask(ctx, "Worker:alice:w1", &client.Message{Message: "save {\"count\": 3}"})
	must(t, err)
	_, err = alice.Agents().Create(ctx, "Worker:alice:x", map[string]string{"note": xss})
	must(t, err)
	_, err = alice.Ask(ctx, "Worker:alice:x", &client.Message{Message: "hello"})
	must(t, err)
	// Script cannot even be a name: the cluster refuses it.
	if _, err := alice.Ask(ctx, "Worker:alice:<script>", &client.Message{Message: "x"}); err == nil {
		t.Error("an agent named <script> was accepted")
	}
	if _, err := alice.Topics().Publish(ctx, "orders.<script>", &client.Message{Message: "x"}); err == nil {
		t.Error("a topic named orders.<script> was accepted")
	}
	// Two dead letters, one with script in its message.
	_, err = alice.Topics().Subscribe(ctx, "Failer:alice:f1", "audit", "orders.#", client.MaxAttempts(1))
	must(t, err)
	for _, m := range []string{xss, "second"} {
		_, err := alice.Topics().Publish(ctx, "orders.new", &client.Message{Message: m})
		must(t, err)
	}
	testutil.WaitFor(t, "two dead letters", func() bool {
		p, err := alice.Topics().DeadLetters(ctx, "audit", client.Limit(10))
		return err == nil && len(p.Items) == 2
	})
	// An A2A task that works until cancelled.
	taskID := a2aSend(t, http.DefaultClient, "http://"+silos[0].A2AAddr(), "Block/alice/b1", aliceKey)
	// An MCP session of alice's, with one tool call.
	mcpSession := mcpCall(t, silos[0].MCPAddr(), aliceKey)

	t.Logf("cluster up and filled in %v", time.Since(start).Round(time.Millisecond))

	// The browser.
	b, stop := browsertest.New(t, ctx, chromium, 1200, 760)
	defer stop()
	bctx, runT, run, text, eval := b.Ctx, b.RunT, b.Run, b.Text, b.Eval
	noXSS := func(where string) {
		t.Helper()
		if v := eval(`window.__xss === undefined ? null : window.__xss`, false); v != nil {
			t.Fatalf("%s: the script ran (window.__xss = %v)", where, v)
		}
	}
	// act clicks an action's button and accepts the confirmation it asks
	// for, which must start with want. (The page's confirm is replaced:
	// the test reads its question and answers yes.)
	act := func(sel, want string) {
		t.Helper()
		eval(`window.__asked = null; window.confirm = q => { window.__asked = q; return true; }; true`, false)
		run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
		runT("the confirmation of "+sel, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.__asked !== null`, chromedp.WithPollingInterval(50*time.Millisecond)))
			return err
		})
		if q := fmt.Sprint(eval(`window.__asked`, false)); !strings.HasPrefix(q, want) {
			t.Errorf("%s asked %q, want %q", sel, q, want)
		}
	}
	shots := os.Getenv("DASHBOARD_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shot := func(name string) {
		t.Helper()
		var b []byte
		runT("screenshot "+name, func(ctx context.Context) (err error) {
			b, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		})
		must(t, os.WriteFile(filepath.Join(shots, name+".png"), recompress(t, b), 0o644))
	}
	login := func(k string) {
		t.Helper()
		run("log in", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("key")),
			chromedp.SendKeys(chromedp.ID("key"), k), chromedp.Click(chromedp.ID("login")),
			chromedp.WaitVisible(chromedp.ID("members")))
	}
	waitText := func(sel, want string) {
		t.Helper()
		runT("wait for "+sel+" to say "+want, func(ctx context.Context) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector(%q)||{}).innerText?.includes(%q)`, sel, want), chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}

	// Not logged in: the login page; a wrong key is refused.
	run("open the login page", chromedp.Navigate(base+"/ui/agents"), chromedp.WaitVisible(chromedp.ID("key")))
	run("a wrong key", chromedp.SendKeys(chromedp.ID("key"), "nope"), chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("error")))
	shot("login")

	// alice: the cluster page against the SDK's members.
	login(aliceKey)
	members, err := alice.Admin().Members(ctx)
	must(t, err)
	got := text("#members")
	for _, m := range members {
		if !strings.Contains(got, m.Name) || !strings.Contains(got, m.State) {
			t.Errorf("cluster page %q lacks member %s (%s)", got, m.Name, m.State)
		}
	}
	// The charts draw every silo's samples, not only s0's.
	charts := `Number(document.body.dataset.charted||0) >= 2 && (document.body.dataset.silos||"").split(",").sort().join(",") === "s0,s1,s2"`
	if err := func() error {
		ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
		defer cancel()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](charts, chromedp.WithPollingInterval(200*time.Millisecond)))
		return err
	}(); err != nil {
		t.Fatalf("charts of the three silos: %v; the charts show %v; series.json: %v", err,
			eval(`document.body.dataset.silos`, false), eval(`fetch("/ui/series.json").then(r => r.text())`, true))
	}
	shot("cluster")

	// Agents: the count the SDK gives alice.
	agents, err := alice.Agents().List(ctx, "", "")
	must(t, err)
	run("agents", chromedp.Navigate(base+"/ui/agents"), chromedp.WaitVisible(chromedp.ID("agents")))
	if got := text("#total"); !strings.HasPrefix(got, fmt.Sprintf("%d active agents", len(agents))) {
		t.Errorf("agents page says %q, the SDK lists %d", got, len(agents))
	}
	shot("agents")

	// One agent: the configuration's script is text.
	run("agent x", chromedp.Navigate(base+"/ui/agent?addr=Worker:alice:x"), chromedp.WaitVisible(chromedp.ID("config")))
	if got := text("#config"); !strings.Contains(got, `<script>window.__xss=1</script>`) {
		t.Errorf("configuration shows %q, want the script as text", got)
	}
	noXSS("agent page")

	// w1: its silo as the SDK says, its state and reminder; remove the
	// reminder, then deactivate it.
	silo := ""
	for _, a := range agents {
		if a.Address == "Worker:alice:w1" {
			silo = a.Silo
		}
	}
	run("agent w1", chromedp.Navigate(base+"/ui/agent?addr=Worker:alice:w1"), chromedp.WaitVisible(chromedp.ID("reminders")))
	if got := text("#silo"); got != silo || silo == "" {
		t.Errorf("agent page says silo %q, the SDK %q", got, silo)
	}
	if got := text("#state"); !strings.Contains(got, `"count": 3`) {
		t.Errorf("state %q", got)
	}
	shot("agent")
	act("#reminders button.remove", "Remove reminder tick of Worker:alice:w1?")
	waitText("#flash", "Removed reminder tick of Worker:alice:w1")
	if rs, err := alice.Agents().Reminders(ctx, "Worker:alice:w1"); err != nil || len(rs) != 0 {
		t.Errorf("after removal the SDK lists %v, %v", rs, err)
	}
	act("#deactivate", "Deactivate Worker:alice:w1?")
	waitText("#flash", "Deactivated Worker:alice:w1")
	testutil.WaitFor(t, "w1 deactivated", func() bool {
		as, err := alice.Agents().List(ctx, "", "Worker")
		if err != nil {
			return false
		}
		for _, a := range as {
			if a.Address == "Worker:alice:w1" {
				return false
			}
		}
		return true
	})

	// Reminders of w2.
	run("reminders", chromedp.Navigate(base+"/ui/reminders?agent=Worker:alice:w2"), chromedp.WaitVisible(chromedp.ID("reminders")))
	if got := text("#reminders"); !strings.Contains(got, "tick") {
		t.Errorf("reminders page %q lacks w2's reminder", got)
	}
	shot("reminders")

	// Topics and dead letters: drop one, replay the other.
	run("topics", chromedp.Navigate(base+"/ui/topics"), chromedp.WaitVisible(chromedp.ID("subscriptions")))
	if got := text("#subscriptions"); !strings.Contains(got, "alice:audit") || !strings.Contains(got, "Failer:alice:f1") {
		t.Errorf("topics page %q", got)
	}
	shot("topics")
	run("dead letters", chromedp.Navigate(base+"/ui/deadletters?sub=alice:audit"), chromedp.WaitVisible(chromedp.ID("deadletters")))
	if got := text("#deadletters"); !strings.Contains(got, `<script>window.__xss=1</script>`) || !strings.Contains(got, "second") {
		t.Errorf("dead letters %q", got)
	}
	noXSS("dead letters")
	shot("deadletters")
	p, err := alice.Topics().DeadLetters(ctx, "audit", client.Limit(10))
	must(t, err)
	ds := p.Items
	act("#deadletters tr:nth-child(2) button.drop", "Drop dead letter "+ds[1].ID+"?")
	waitText("#flash", "Dropped 1 dead letters of alice:audit")
	p, err = alice.Topics().DeadLetters(ctx, "audit", client.Limit(10))
	left := p.Items
	if err != nil || len(left) != 1 || left[0].ID != ds[0].ID {
		t.Fatalf("after dropping %s the SDK lists %v, %v", ds[1].ID, left, err)
	}
	act("#deadletters button.replay", "Replay dead letter "+ds[0].ID+"?")
	waitText("#flash", "Replayed 1 dead letters of alice:audit")
	testutil.WaitFor(t, "the replayed letter delivered and dead again", func() bool {
		p, err := alice.Topics().DeadLetters(ctx, "audit", client.Limit(10))
		return err == nil && len(p.Items) == 1 && p.Items[0].ID != ds[0].ID
	})

	// A2A tasks: cancel the working one.
	run("a2a", chromedp.Navigate(base+"/ui/a2a"), chromedp.WaitVisible(chromedp.ID("tasks")))
	waitText("#tasks", string(taskID))
	waitText("#tasks", "working")
	shot("a2a")
	act("#tasks button.cancel", "Cancel task "+string(taskID)+" of Block:alice:b1?")
	waitText("#flash", "Cancelled task "+string(taskID))
	waitText("#tasks", "canceled")
	if st := a2aState(t, http.DefaultClient, "http://"+silos[0].A2AAddr(), "Block/alice/b1", aliceKey, taskID); st != spec.TaskStateCanceled {
		t.Errorf("the task is %s after the cancel", st)
	}

	// The directory: the entries the SDK lists, and a search.
	entriesPage, err := alice.Directory().List(ctx, client.DirectoryQuery{})
	entries := entriesPage.Items
	must(t, err)
	run("directory", chromedp.Navigate(base+"/ui/directory"), chromedp.WaitVisible(chromedp.ID("directory")))
	got = text("#directory")
	for _, e := range entries {
		if !strings.Contains(got, e.Name) {
			t.Errorf("directory page lacks %s/%s", e.Kind, e.Name)
		}
	}
	if len(entries) == 0 {
		t.Error("the SDK lists no directory entries")
	}
	shot("directory")

	// MCP: alice's session and the agents' tools.
	run("mcp", chromedp.Navigate(base+"/ui/mcp"), chromedp.WaitVisible(chromedp.ID("mcp-sessions")))
	waitText("#mcp-sessions", mcpSession)
	if got := text("#mcp-sessions"); !strings.Contains(got, "alice") || !strings.Contains(got, "dashboard-test") {
		t.Errorf("MCP sessions %q", got)
	}
	if got := text("#mcp-tools"); !strings.Contains(got, "Worker") || !strings.Contains(got, "Echoes.") {
		t.Errorf("MCP tools %q", got)
	}
	shot("mcp")

	// The ACL is for administrators: alice is refused.
	run("acl as alice", chromedp.Navigate(base+"/ui/acl"), chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("#error"); !strings.Contains(got, "PermissionDenied") {
		t.Errorf("alice's ACL page says %q", got)
	}
	run("log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("key")))

	// root: the rules as the SDK lists them, and the explain box.
	login(rootKey)
	acl, err := root.ACL().Rules(ctx)
	must(t, err)
	rules := acl.Rules
	run("acl", chromedp.Navigate(base+"/ui/acl"), chromedp.WaitVisible(chromedp.ID("rules")))
	got = text("#rules")
	for _, r := range rules {
		if !strings.Contains(got, fmt.Sprint(r.ID)) || !strings.Contains(got, r.CallerPattern) {
			t.Errorf("rules table %q lacks rule %v", got, r)
		}
	}
	for perm, want := range map[string]string{"Read": "Allowed: rule", "Configure": "Denied"} {
		// A fresh page each time: the previous answer must not be the one
		// waited for while the new one loads.
		run("explain", chromedp.Navigate(base+"/ui/acl"), chromedp.WaitVisible(chromedp.ID("rules")),
			chromedp.SetValue(chromedp.ID("caller"), "bob"), chromedp.SetValue(chromedp.ID("agent"), "Worker:alice:w2"),
			chromedp.SetValue(chromedp.ID("perm"), perm), chromedp.Click(chromedp.ID("explain")), chromedp.WaitVisible(chromedp.ID("answer")))
		ans, err := root.ACL().Check(ctx, "bob", "Worker:alice:w2", perm)
		must(t, err)
		if got := text("#answer"); !strings.HasPrefix(got, want) || ans.Allowed != strings.HasPrefix(want, "Allowed") {
			t.Errorf("explain bob %s: %q; the SDK: %v", perm, got, ans)
		}
	}
	shot("acl")
	// An administrator sees every MCP session.
	run("mcp as root", chromedp.Navigate(base+"/ui/mcp"), chromedp.WaitVisible(chromedp.ID("mcp-sessions")))
	waitText("#mcp-sessions", mcpSession)
	run("log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("key")))

	// bob reads alice's agent but gets no button, and a forged action
	// (with his own valid CSRF token) is refused by the gateway.
	login(bobKey)
	run("mcp as bob", chromedp.Navigate(base+"/ui/mcp"), chromedp.WaitVisible(chromedp.ID("mcp-sessions")))
	if got := text("#mcp-sessions"); strings.Contains(got, mcpSession) {
		t.Errorf("bob sees alice's MCP session: %q", got)
	}
	run("agent as bob", chromedp.Navigate(base+"/ui/agent?addr=Worker:alice:w2"), chromedp.WaitVisible(chromedp.ID("reminders")))
	if buttons := eval(`document.querySelectorAll("#deactivate, button.remove").length`, false); buttons != float64(0) {
		t.Errorf("bob sees %d action buttons on alice's agent", buttons)
	}
	answer := eval(`fetch("/ui/agent/deactivate", {method: "POST", body: new URLSearchParams({agent: "Worker:alice:w2", csrf: document.querySelector("input[name=csrf]").value})}).then(r => r.text())`, true)
	if !strings.Contains(fmt.Sprint(answer), "Refused: PermissionDenied") {
		t.Errorf("bob's deactivate answered %q", answer)
	}
	// A listing may miss a silo that is slow to answer on a loaded
	// machine; an agent that was deactivated stays missing (nothing asks
	// it again), so waiting for it to be listed still catches one.
	testutil.WaitFor(t, "w2 still active after bob's refused deactivate", func() bool {
		as, err := alice.Agents().List(ctx, "", "Worker")
		return err == nil && hasAgent(as, "Worker:alice:w2")
	})
	csrfChecks(t, base, aliceKey)
}

// csrfChecks: an action without the token, or from another origin, is
// refused; with both it is taken. Pages need a login.
func csrfChecks(t *testing.T, base, k string) {
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(base + "/ui/agents")
	must(t, err)
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login") {
		t.Errorf("anonymous /ui/agents: %d %s", resp.StatusCode, loc)
	}
	resp, err = hc.PostForm(base+"/ui/login", url.Values{"key": {k}})
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	resp, err = hc.Get(base + "/ui/agent?addr=Worker:alice:w3")
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the agent page")
	}
	post := func(form url.Values, origin string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/ui/agent/deactivate", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := hc.Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(url.Values{"agent": {"Worker:alice:w3"}}, ""); code != http.StatusForbidden {
		t.Errorf("without a CSRF token: %d", code)
	}
	if code, _ := post(url.Values{"agent": {"Worker:alice:w3"}, "csrf": {"forged"}}, ""); code != http.StatusForbidden {
		t.Errorf("with a wrong CSRF token: %d", code)
	}
	if code, _ := post(url.Values{"agent": {"Worker:alice:w3"}, "csrf": {string(m[1])}}, "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("from another origin: %d", code)
	}
	if code, b := post(url.Values{"agent": {"Worker:alice:w3"}, "csrf": {string(m[1])}}, base); code != http.StatusOK || !strings.Contains(b, "Deactivated Worker:alice:w3") {
		t.Errorf("with the token from the same origin: %d %s", code, b)
	}
}

// mcpCall opens an MCP session on addr with key, calls the Worker type's
// tool once and returns the session's id. The session stays open until the
// test ends.
func mcpCall(t *testing.T, addr, k string) string {
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "dashboard-test", Version: "1.0"}, nil)
	hc := &http.Client{Transport: keyed{k}}
	cs, err := c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	must(t, err)
	t.Cleanup(func() { cs.Close() })
	tools, err := cs.ListTools(t.Context(), nil)
	must(t, err)
	name := ""
	for _, tl := range tools.Tools {
		if strings.HasPrefix(tl.Name, "Worker") {
			name = tl.Name
		}
	}
	res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: name, Arguments: map[string]any{"agent": "alice:m1", "message": "hi"}})
	must(t, err)
	if res.IsError {
		t.Fatalf("the tool call failed: %+v", res.Content)
	}
	return cs.ID()
}

// keyed adds an API key to each request.
type keyed struct{ k string }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("x-api-key", k.k)
	return http.DefaultTransport.RoundTrip(r)
}

// a2aSend starts a task with agent (Type/owner/alias) over HTTP+JSON
// (hc, to base: scheme and host; k the API key, if any),
// returning at once, and returns its id.
func a2aSend(t *testing.T, hc *http.Client, base, agent, k string) spec.TaskID {
	req := &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("wait")), Config: &spec.SendMessageConfig{ReturnImmediately: true}}
	b, err := json.Marshal(req)
	must(t, err)
	var task spec.Task
	a2aDo(t, hc, http.MethodPost, base+"/a2a/"+agent+"/message:send", k, b, &struct {
		Task *spec.Task `json:"task"`
	}{&task})
	if task.ID == "" {
		t.Fatal("no task id")
	}
	return task.ID
}

func a2aState(t *testing.T, hc *http.Client, base, agent, k string, id spec.TaskID) spec.TaskState {
	var task spec.Task
	a2aDo(t, hc, http.MethodGet, base+"/a2a/"+agent+"/tasks/"+string(id), k, nil, &task)
	return task.Status.State
}

func a2aDo(t *testing.T, hc *http.Client, method, u, k string, body []byte, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if k != "" {
		req.Header.Set("x-api-key", k)
	}
	resp, err := hc.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, u, err, b)
	}
}

func hasAgent(as []client.AgentInfo, addr string) bool {
	for _, a := range as {
		if a.Address == addr {
			return true
		}
	}
	return false
}

// recompress writes a screenshot again at PNG's best compression.
func recompress(t *testing.T, b []byte) []byte {
	img, err := png.Decode(bytes.NewReader(b))
	must(t, err)
	var out bytes.Buffer
	must(t, (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img))
	return out.Bytes()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
