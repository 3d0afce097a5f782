package memory_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// The Go fragments of docs/memory.md compile against this checkout.
func TestDocFragmentsCompile(t *testing.T) {
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/memdoc\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	src := `package memdoc

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/memory"
)

` + testutil.DocBlock(t, "docs/memory.md", "memory:agent") + "\n" + testutil.DocBlock(t, "docs/memory.md", "memory:sdk") + `
var _ = remember
var _ grain.Agent = planner{}
`
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "doc.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(mod, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "-mod=mod", ".")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/memory.md's Go does not compile: %v\n%s", err, out)
	}
}
