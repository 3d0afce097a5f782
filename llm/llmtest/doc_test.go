package llmtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// The test of docs/agents.md's "Testing a model agent" passes, run with
// go test in a module of its own that uses this checkout, as a reader who
// copies it into a _test.go file would.
func TestDocTestingAModelAgent(t *testing.T) {
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/modeltest\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	src := "package modeltest\n\nimport (\n" +
		"\t\"context\"\n\t\"testing\"\n\n" +
		"\t\"github.com/agentsilo/agentsilo/grain\"\n" +
		"\t\"github.com/agentsilo/agentsilo/grain/graintest\"\n" +
		"\t\"github.com/agentsilo/agentsilo/llm\"\n" +
		"\t\"github.com/agentsilo/agentsilo/llm/llmtest\"\n)\n\n" +
		testutil.DocBlock(t, "docs/agents.md", "agent:testing-model")
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "helper_test.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(mod, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-mod=mod", "-count=1", "-run", "^TestHelper$", "-v", ".")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/agents.md's model agent test does not pass: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestHelper") {
		t.Fatalf("docs/agents.md's TestHelper did not run:\n%s", out)
	}
}
