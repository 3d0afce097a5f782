package tests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// chattyModel answers a turn with what the user said in it and how many
// user messages it was sent, and a request to summarise with the user's
// lines it was given (so a name said early lives on in the summaries).
func chattyModel(r llmtest.Request) llmtest.Step {
	if strings.HasPrefix(r.System, "You summarise") {
		var said []string
		for line := range strings.Lines(r.LastMessage().Text) {
			if rest, ok := strings.CutPrefix(line, "user: "); ok {
				said = append(said, strings.TrimSpace(rest))
			}
			if rest, ok := strings.CutPrefix(line, "Earlier summary:"); ok {
				said = append(said, strings.TrimSpace(rest))
			}
		}
		return llmtest.Step{Text: "summary of " + strings.Join(said, "; ")}
	}
	n := 0
	for _, m := range r.Messages {
		if m.Role == "user" {
			n++
		}
	}
	return llmtest.Step{Text: fmt.Sprintf("heard %q with %d user messages", r.LastMessage().Data, n)}
}

// sent reports whether the model request r carried text: in a message, or
// in the system prompt (a summary).
func sent(r llmtest.Request, text string) bool {
	if strings.Contains(r.System, text) {
		return true
	}
	return slices.ContainsFunc(r.Messages, func(m llmtest.Message) bool { return strings.Contains(m.Data, text) })
}

// TestConversationSurvivesKillAndRestart: a declared model type whose
// conversations are trimmed to a small token budget with summaries. A
// conversation goes on on another silo after the silo that held it is
// killed (kill -9), and after every silo is stopped and started again; the
// earliest turn's words reach the model all along, through the summaries
// once the turns themselves are trimmed. An A2A context, asked by the
// a2a-go client, goes on across the restart as a conversation of its own.
// The owner lists and deletes all its conversations with the CLI.
func TestConversationSurvivesKillAndRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, A2A: true, Args: []string{"--llm-allow-private-networks"}})
	srv := llmtest.NewFunc(chattyModel)
	defer srv.Close()
	def := fmt.Sprintf(`type: Chatty
model: {provider: openai, base_url: %s, name: fake-1}
conversation: {max_tokens: 40, trim: summarize}
`, srv.OpenAIURL())
	admin := dialAs(t, c, "system")
	if a, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil || len(a.Unconfirmed) != 0 {
		t.Fatalf("apply: %+v, %v", a, err)
	}
	const agent = "Chatty:" + testcluster.Principal + ":c"
	sdk := c.Client(t)
	say := func(text string) llmtest.Request {
		t.Helper()
		r, err := sdk.Ask(t.Context(), agent, &client.Message{Message: text, IdempotencyKey: "say-" + text})
		if err != nil || !strings.HasPrefix(r.Message, "heard ") {
			t.Fatalf("say %q: %+v %v", text, r, err)
		}
		reqs := srv.Requests()
		return reqs[len(reqs)-1]
	}
	say("my name is Ada")
	names := c.Names()
	victim := slices.Index(names, c.Owner(agent))
	t.Logf("kill -9 %s, which holds %s", names[victim], agent)
	c.Kill(victim)
	c.WaitGone(names[victim])
	if r := say("what is my name"); !sent(r, "my name is Ada") {
		t.Fatalf("after the kill, the model was not sent the first turn: system %q, messages %+v", r.System, r.Messages)
	}
	c.Restart(victim)
	c.WaitMembers(c.Len())

	// An A2A context, apart from the agent's own conversation.
	// a2aClient asks as the loopback principal dev: its agent.
	const devAgent = "Chatty:dev:c"
	a2aCtx := func() *a2aclient.Client { return a2aClient(t, c.Silo(0), devAgent) }
	inContext := func(cl *a2aclient.Client, text string) string {
		t.Helper()
		msg := spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart(text))
		msg.ContextID = "trip-42"
		res, err := cl.SendMessage(t.Context(), &spec.SendMessageRequest{Message: msg})
		task, ok := res.(*spec.Task)
		if err != nil || !ok || task.Status.State != spec.TaskStateCompleted || len(task.Artifacts) == 0 {
			t.Fatalf("A2A %q: %v %v", text, res, err)
		}
		var b strings.Builder
		for _, p := range task.Artifacts[0].Parts {
			b.WriteString(p.Text())
		}
		return b.String()
	}
	if got := inContext(a2aCtx(), "to Lisbon"); got != `heard "to Lisbon" with 1 user messages` {
		t.Fatalf("the A2A context's first turn: %q, want a conversation of its own", got)
	}

	for i := range c.Len() {
		c.Stop(i)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	c.WaitMembers(c.Len())
	sdk = c.Client(t)
	for _, text := range []string{"and my dog is Rex", "where do I live", "what is my name again"} {
		if r := say(text); !sent(r, "Ada") {
			t.Fatalf("after the restart, %q: the model was not sent the first turn nor a summary of it: system %q, messages %+v", text, r.System, r.Messages)
		}
	}
	if got := inContext(a2aCtx(), "by train"); got != `heard "by train" with 2 user messages` {
		t.Fatalf("the A2A context after the restart: %q, want its conversation continued", got)
	}
	summaries := 0
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.System, "You summarise") {
			summaries++
		}
	}
	rec := readRecord(t, sdk, agent)
	if summaries == 0 || rec.Summary == nil || !strings.Contains(rec.Summary.Text, "Ada") || rec.Summary.Turns == 0 {
		t.Fatalf("%d summarising requests; the record's summary %+v", summaries, rec.Summary)
	}
	t.Logf("%d summarising requests; the summary folds %d turns: %q", summaries, rec.Summary.Turns, rec.Summary.Text)

	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/client").CombinedOutput(); err != nil {
		t.Fatalf("build the client: %v\n%s", err, out)
	}
	cli := func(as string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), bin, append([]string{"--addr", c.Silo(2).GatewayAddr, "--as", as}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("client %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	ctxAgent := grain.ContextAddress(grain.Address{Type: "Chatty", Owner: "dev", Alias: "c"}, "trip-42").String()
	for _, o := range []struct{ owner, want string }{{testcluster.Principal, agent}, {"dev", ctxAgent}} {
		if out := cli(o.owner, "conversations", "--owner", o.owner); out != o.want+"\n" {
			t.Fatalf("client conversations of %s: %q, want %q", o.owner, out, o.want)
		}
		if out := cli(o.owner, "conversations", "delete", "--owner", o.owner); out != "deleted 1 conversations\n" {
			t.Fatalf("client conversations delete of %s: %q", o.owner, out)
		}
		if out := cli(o.owner, "conversations", "--owner", o.owner); out != "none\n" {
			t.Fatalf("client conversations of %s after deleting them: %q", o.owner, out)
		}
	}
	if r := say("who am I"); sent(r, "Ada") {
		t.Fatal("the model was sent a deleted conversation")
	}
}
