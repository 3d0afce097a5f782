package tests

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// guideModel is the conversations guide's model: it greets, remembers a
// name it was told (in the conversation or its summary), and searches
// the directory when asked to find an agent, then reports what it found.
func guideModel(r llmtest.Request) llmtest.Step {
	last := r.LastMessage()
	all := r.System
	for _, m := range r.Messages {
		all += "\n" + m.Text
	}
	switch {
	case last.Role == "tool":
		found := strings.Join(strings.Fields(last.Data), " ")
		return llmtest.Step{Text: "Found: " + found[:min(60, len(found))]}
	case strings.Contains(last.Text, "find me"):
		return llmtest.Step{ToolCalls: []llmtest.ToolCall{{ID: "s1", Name: "directory_search", Arguments: `{"text": "counts"}`}}}
	case strings.Contains(last.Text, "my name") && strings.Contains(all, "I am Ada"):
		return llmtest.Step{Text: "Your name is Ada."}
	case strings.Contains(last.Text, "my name"):
		return llmtest.Step{Text: "I do not know your name."}
	}
	return llmtest.Step{Text: "Hello! Lisbon it is."}
}

// TestConversationGuide runs docs/conversations.md's blocks as one shell
// script, as written but for the addresses (free ports on the same
// loopback addresses) and $MODEL_URL (a scripted model): a conversation
// continued after its silo restarted, a tool call approved from the CLI
// and by an A2A client (the guide's Go program, with the official SDK),
// and an owner's conversations deleted.
func TestConversationGuide(t *testing.T) {
	buildBinaries(t)
	l, err := net.Listen("tcp", "127.0.0.10:0")
	testutil.Need(t, err == nil, "loopback addresses 127.0.0.10 and up (as Linux has)")
	l.Close()
	model := llmtest.NewFunc(guideModel)
	defer model.Close()

	var script strings.Builder
	for _, b := range []string{"conversations:start", "conversations:restart", "conversations:approve", "conversations:a2a", "conversations:stop"} {
		script.WriteString(testutil.DocBlock(t, "docs/conversations.md", b))
	}
	addrs := map[string]string{}
	s := regexp.MustCompile(`127\.0\.0\.\d+:\d+`).ReplaceAllStringFunc(script.String(), func(a string) string {
		if got, ok := addrs[a]; ok {
			return got
		}
		if a == "127.0.0.1:2379" {
			addrs[a] = testutil.FreeAddrPair(t)
			return addrs[a]
		}
		host, _, _ := net.SplitHostPort(a)
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addrs[a] = l.Addr().String()
		l.Close()
		return addrs[a]
	})
	dir := t.TempDir()
	// The A2A client's program, saved where the guide says.
	if err := os.MkdirAll(filepath.Join(dir, "approve"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "approve", "main.go"), []byte(testutil.DocBlock(t, "docs/conversations.md", "conversations:a2a-go")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := docShell(t, dir, s, "MODEL_URL="+model.OpenAIURL())
	for _, want := range []string{
		"Hello! Lisbon it is.\n",
		"Your name is Ada.\n",
		"Travel:dev:trip/",          // the approval listed
		"approved Travel:dev:trip/", // and approved
		"Found: ",
		"TASK_STATE_INPUT_REQUIRED ",   // the A2A client's task waits
		"TASK_STATE_COMPLETED Found: ", // and ends once it approved
		"deleted 2 conversations\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the conversations guide printed\n%s\nwant %q in it", out, want)
		}
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("the guide left %v behind (%v)", left, err)
	}
}
