package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestTypedSkillsGuide runs the typed skills guide (docs/typed-skills.md):
// its program, in a module of its own that uses this checkout, prints what
// the guide says; its Go SDK fragment compiles.
func TestTypedSkillsGuide(t *testing.T) {
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/typed\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", goMod)
	write("go.sum", string(sum))
	write("main.go", testutil.DocBlock(t, "docs/typed-skills.md", "typed:program"))
	write("quote/quote.go", "package quote\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\n\t\"github.com/agentsilo/agentsilo/client\"\n\t\"github.com/agentsilo/agentsilo/errs\"\n)\n\n"+
		testutil.DocBlock(t, "docs/typed-skills.md", "typed:client"))
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("vet", "./quote/")
	got := run("run", ".")
	if want := testutil.DocBlock(t, "docs/typed-skills.md", "typed:program-output"); got != want {
		t.Fatalf("the guide's program printed\n%s\nthe guide says\n%s", got, want)
	}
}
