package llm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
)

// The definition of docs/models.md parses and validates.
func TestDocDefinition(t *testing.T) {
	def, err := llm.ParseDefinition([]byte(testutil.DocBlock(t, "docs/models.md", "models:definition")))
	if err != nil {
		t.Fatal(err)
	}
	if def.Type != "Helper" || len(def.Tools) != 5 || def.Limits.MaxRounds != 8 || len(def.Schedule) != 2 || def.Limits.OwnerDailyTokens != 2000000 || len(def.Approval) != 1 || def.Limits.ApprovalTimeout != llm.Duration(24*time.Hour) {
		t.Errorf("parsed %+v", def)
	}
}

// The definition of docs/trust.md parses and validates, and its Go (a
// skill marked sensitive, a client lowering its message's label)
// compiles against this checkout, in a module of its own.
func TestTrustDoc(t *testing.T) {
	def, err := llm.ParseDefinition([]byte(testutil.DocBlock(t, "docs/trust.md", "trust:definition")))
	if err != nil {
		t.Fatal(err)
	}
	if def.Type != "Clerk" || len(def.Tools) != 2 || len(def.Sensitive) != 1 || def.Sensitive[0] != "Payments_refund" || def.OnUntrusted != llm.OnUntrustedApprove {
		t.Errorf("parsed %+v", def)
	}
	src := "package trustdoc\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\n\t\"github.com/agentsilo/agentsilo/client\"\n\t\"github.com/agentsilo/agentsilo/grain\"\n)\n\n" +
		"type Payment struct{ To string; Amount int }\n\ntype Receipt struct{ ID string }\n\n" +
		"func register(reg *grain.Registry, newPayments grain.Factory) error {\n" + testutil.DocBlock(t, "docs/trust.md", "trust:skill") + "return err\n}\n\n" +
		"func pass(ctx context.Context, c *client.Client, pasted string) error {\n" + testutil.DocBlock(t, "docs/trust.md", "trust:client") + "return nil\n}\n\n" +
		"var _, _ = register, pass\n"
	compileDoc(t, "example.com/trustdoc", src)
}

// compileDoc vets src, the one file of the module mod, against this
// checkout.
func compileDoc(t *testing.T, mod, src string) {
	t.Helper()
	root := testutil.RepoRoot(t)
	dir := t.TempDir()
	goMod := "module " + mod + "\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "doc.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "-mod=mod", ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the docs' Go does not compile: %v\n%s\n%s", err, out, src)
	}
}

// The definition of the README parses and validates.
func TestReadmeDefinition(t *testing.T) {
	def, err := llm.ParseDefinition([]byte(testutil.DocBlock(t, "README.md", "readme:model")))
	if err != nil {
		t.Fatal(err)
	}
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	if def.Type != "Helper" || len(def.Tools) != 3 || def.Limits.MaxRounds != 8 || def.Model.APIKeyEnv != "OPENAI_API_KEY" {
		t.Errorf("parsed %+v", def)
	}
}

// The Go of docs/models.md (registering a type, deciding an approval)
// compiles against this checkout, in a module of
// its own, as a reader's would.
func TestDocRegisterCompiles(t *testing.T) {
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/modelsdoc\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	src := "package modelsdoc\n\nimport (\n\t\"context\"\n\t\"encoding/json\"\n\n\t\"github.com/agentsilo/agentsilo/grain\"\n\t\"github.com/agentsilo/agentsilo/llm\"\n)\n\n" +
		testutil.DocBlock(t, "docs/models.md", "models:register") + "\nvar _ = registerHelper\n\n" +
		"func decideIt(ctx context.Context, host grain.Asker, reply *grain.Message) error {\n" +
		testutil.DocBlock(t, "docs/models.md", "models:approval") + "\nreturn err\n}\n\nvar _ = decideIt\n"
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "doc.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(mod, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "-mod=mod", ".")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/models.md's Go does not compile: %v\n%s", err, out)
	}
}
