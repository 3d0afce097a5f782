package tests

import (
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// TestAuditGuide runs docs/audit.md's walk through as a shell script, as
// written but for the addresses (free ports on the same loopback
// addresses) and $MODEL_URL (the conversations guide's scripted model): a
// tool call and a definition recorded, listed, exported as JSON lines,
// verified, and refused to a principal without Audit.
func TestAuditGuide(t *testing.T) {
	buildBinaries(t)
	l, err := net.Listen("tcp", "127.0.0.11:0")
	testutil.Need(t, err == nil, "loopback addresses 127.0.0.11 and up (as Linux has)")
	l.Close()
	model := llmtest.NewFunc(guideModel)
	defer model.Close()
	script := testutil.DocBlock(t, "docs/audit.md", "audit:walkthrough")
	addrs := map[string]string{}
	s := regexp.MustCompile(`127\.0\.0\.\d+:\d+`).ReplaceAllStringFunc(script, func(a string) string {
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
	out, _ := docShell(t, dir, s, "MODEL_URL="+model.OpenAIURL())
	for _, want := range []string{
		"Found: ",
		"  definition  system  system:types apply  ok",
		"  tool_call  dev",
		`"kind":"tool_call"`,
		`"skill":"directory_search"`,
		"ok: 2 records in ",
		"exit 4\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the audit guide printed\n%s\nwant %q in it", out, want)
		}
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("the guide left %v behind (%v)", left, err)
	}
}
