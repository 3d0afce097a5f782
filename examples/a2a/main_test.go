package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/examples/internal/exampletest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// TestReviewerOverA2A runs the program with A2A on, as the README's
// a2aexample:run does (at a free address instead of 127.0.0.1:9090): the
// card names the type's skill, the README's SendMessage body gets the
// review, and the A2A Go SDK's client, built from the card, too.
func TestReviewerOverA2A(t *testing.T) {
	block := testutil.DocBlock(t, "examples/a2a/README.md", "a2aexample:run")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 3 || lines[0] != "go run ./examples/a2a --a2a-addr 127.0.0.1:9090 &" {
		t.Fatalf("examples/a2a/README.md a2aexample:run: %q", lines)
	}
	addr := testutil.FreeAddr(t)
	exampletest.Start(t, nil, "--a2a-addr", addr)
	base := "http://" + addr + "/a2a/Reviewer/dev/r1"

	// The README's curl lines.
	get, err := http.Get(base + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	card, _ := io.ReadAll(get.Body)
	get.Body.Close()
	if !strings.Contains(lines[1], "/a2a/Reviewer/dev/r1/.well-known/agent-card.json") || !strings.Contains(string(card), `"id":"review"`) {
		t.Errorf("the card: %s", card)
	}
	_, body, ok := strings.Cut(lines[2], "-d '")
	body = strings.TrimSuffix(body, "'")
	if !ok || !strings.Contains(lines[2], "-X POST http://127.0.0.1:9090/a2a/Reviewer/dev/r1 ") {
		t.Fatalf("the README's send: %q", lines[2])
	}
	post, err := http.Post(base, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(post.Body)
	post.Body.Close()
	if !strings.Contains(string(answer), `"parts":[{"text":"reviewed: 3 words, 1 lines","metadata":{"agentsilo.label":"agent-message","agentsilo.outside":true}}]`) || !strings.Contains(string(answer), "TASK_STATE_COMPLETED") {
		t.Errorf("the README's SendMessage answered %s", answer)
	}

	// The A2A Go SDK's client, from the card.
	resolved, err := agentcard.DefaultResolver.Resolve(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), resolved)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	res, err := c.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("one\ntwo"))})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || task.Artifacts[0].Parts[0].Text() != "reviewed: 2 words, 2 lines" {
		t.Errorf("a2aclient SendMessage: %+v", res)
	}
}
