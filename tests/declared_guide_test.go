package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// TestDeclaringGuide runs the declaring section of docs/models.md as
// written, against a silo started with --llm-allow-private-networks, its
// definition's base_url replaced by a fake model server's on 127.0.0.1.
func TestDeclaringGuide(t *testing.T) {
	buildBinaries(t)
	srv := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		return fakemodel.Step{Text: "order 42 ships tomorrow (" + r.Model + ")"}
	})
	defer srv.Close()
	p := startSilo(t, t.TempDir(), "--llm-allow-private-networks")
	dir := t.TempDir()
	def := testutil.DocBlock(t, "docs/models.md", "models:declared-helper")
	if !strings.Contains(def, "http://127.0.0.1:8000/v1") {
		t.Fatalf("docs/models.md models:declared-helper has no base_url to replace:\n%s", def)
	}
	def = strings.Replace(def, "http://127.0.0.1:8000/v1", srv.OpenAIURL(), 1)
	if err := os.WriteFile(filepath.Join(dir, "helper.yaml"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := docShell(t, dir, testutil.DocBlock(t, "docs/models.md", "models:declare"), "AGENTSILO_ADDR="+p.gateway)
	t.Logf("docs/models.md models:declare printed:\n%s", out)
	for _, want := range []string{
		"valid: type Helper would be created (dry run: nothing stored)\n",
		"created type Helper\n",
		"Helper (declared)",
		"Answers questions about orders.",
		"order 42 ships tomorrow (qwen3-8b)\n",
		"deleted type Helper\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the guide did not print %q", want)
		}
	}
}
