package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RepoRoot returns the repository's root directory (where go.mod is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testutil: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// DocBlock returns the fenced code block that follows the marker line
// <!-- name --> in the Markdown file at path, relative to the repository's
// root (e.g. "docs/mcp.md"). Documentation marks each runnable block so,
// and the test that runs the block reads it with DocBlock, so that the
// text a reader pastes is the text the test ran.
func DocBlock(t testing.TB, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- "+name+" -->")
	if !ok {
		t.Fatalf("%s has no <!-- %s --> block", path, name)
	}
	_, rest, _ = strings.Cut(rest, "```")
	_, rest, _ = strings.Cut(rest, "\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("%s: unterminated block after <!-- %s -->", path, name)
	}
	return block
}
