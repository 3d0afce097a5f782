package a2atests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	sdk "github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// The official JavaScript SDK continues a declared model agent's
// conversation by its contextId, on a silo process: each context a
// conversation of its own (tests/a2ajs/conversation.mjs).
func TestJSConversation(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "a2ajs")
	installJS(t, dir)
	// The model answers with the user's messages it was sent.
	model := llmtest.NewFunc(func(r llmtest.Request) llmtest.Step {
		var said []string
		for _, m := range r.Messages {
			if m.Role == "user" {
				said = append(said, m.Data)
			}
		}
		return llmtest.Step{Text: strings.Join(said, " | ")}
	})
	defer model.Close()
	e := etcdtest.Start(t)
	s := startSilo(t, e, "/js-conversation/", "jsconv", nil, "--llm-allow-private-networks")
	c, err := sdk.Dial(t.Context(), []string{s.gateway}, sdk.WithPrincipal("system"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Admin().ApplyType(t.Context(), fmt.Appendf(nil, "type: Chat\nmodel: {provider: openai, base_url: %s, name: fake-1}\n", model.OpenAIURL())); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "conversation.mjs"), "http://"+s.a2a, "Chat/dev/main").CombinedOutput()
	t.Logf("node conversation.mjs:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\nall ok") {
		t.Fatalf("the JavaScript client: %v", err)
	}
}
