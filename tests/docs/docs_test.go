// Package docs_test keeps the documentation runnable: every runnable code
// block of the README and docs/ is marked with a name that a test reads
// (testutil.DocBlock), and the Go fragments of the guides compile against
// this checkout. CONTRIBUTING.md states the rule.
package docs_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file   string // relative to the repository's root
	line   int    // of the opening fence, 1-based
	info   string // the info string's first word: sh, go, text, ...
	marker string // the name of the <!-- name --> line right before it, if any
	text   string
}

// runnableInfo are the info strings of blocks a reader runs or compiles.
// Output, configuration and illustration use another (text, json, yaml,
// proto, ...).
var runnableInfo = []string{"sh", "bash", "shell", "console", "zsh", "go", "js", "javascript", "mjs", "ts", "python", "py"}

// prompt is a line that starts with a command prompt.
var prompt = regexp.MustCompile(`(?m)^\s*\$ `)

// markerLine is a marker: <!-- name -->.
var markerLine = regexp.MustCompile(`^<!-- ([A-Za-z0-9][^ ]*(?: [^>]*)?) -->$`)

// notRun is the marker prefix of a runnable block no test runs, with the
// reason after it, e.g. <!-- not-run: needs a Kubernetes cluster -->.
const notRun = "not-run:"

func (b block) runnable() bool {
	return slices.Contains(runnableInfo, b.info) || prompt.MatchString(b.text)
}

// docFiles are the Markdown files whose blocks must run: the README,
// CONTRIBUTING.md, every file of docs/, and the examples' READMEs.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	var out []string
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// blocks parses the fenced blocks of the Markdown file path (relative to
// root).
func blocks(t *testing.T, root, path string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []block
		cur     *block
		fence   string
		lastNon string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				out = append(out, *cur)
				cur = nil
				lastNon = ""
				continue
			}
			cur.text += line + "\n"
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			f := trimmed[:3]
			for len(f) < len(trimmed) && trimmed[len(f)] == f[0] {
				f += f[:1]
			}
			info, _, _ := strings.Cut(strings.TrimSpace(trimmed[len(f):]), " ")
			cur = &block{file: path, line: n, info: strings.ToLower(info)}
			fence = f
			if m := markerLine.FindStringSubmatch(lastNon); m != nil {
				cur.marker = m[1]
			}
			continue
		}
		if trimmed != "" {
			lastNon = trimmed
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s:%d: unterminated code block", path, cur.line)
	}
	return out
}

// testSources returns the text of every _test.go file of the repository
// (nested modules included).
func testSources(t *testing.T, root string) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sb.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// TestRunnableBlocksAreRun: every runnable block of the documentation has
// a marker, and a test reads the block by that name (a quoted "name" in
// some _test.go file), or the marker says why no test runs it
// (<!-- not-run: reason -->). A marker names one block of its file.
func TestRunnableBlocksAreRun(t *testing.T) {
	root := testutil.RepoRoot(t)
	sources := testSources(t, root)
	for _, f := range docFiles(t, root) {
		seen := map[string]int{}
		for _, b := range blocks(t, root, f) {
			if b.marker != "" && !strings.HasPrefix(b.marker, notRun) {
				if first, ok := seen[b.marker]; ok {
					t.Errorf("%s:%d: marker <!-- %s --> is used already at line %d (DocBlock reads the first)", f, b.line, b.marker, first)
				}
				seen[b.marker] = b.line
			}
			if !b.runnable() {
				continue
			}
			switch {
			case b.marker == "":
				t.Errorf("%s:%d: a runnable ```%s block without a <!-- name --> marker before it (see CONTRIBUTING.md, \"Docs that run\")", f, b.line, b.info)
			case strings.HasPrefix(b.marker, notRun):
				if strings.TrimSpace(strings.TrimPrefix(b.marker, notRun)) == "" {
					t.Errorf("%s:%d: <!-- not-run: --> without a reason", f, b.line)
				}
			case !strings.Contains(sources, fmt.Sprintf("%q", b.marker)):
				t.Errorf("%s:%d: block <!-- %s --> is run by no test: no _test.go file mentions %q", f, b.line, b.marker, b.marker)
			}
		}
	}
}

// TestBlocksParse checks the checker on a small document.
func TestBlocksParse(t *testing.T) {
	dir := t.TempDir()
	doc := "# T\n\n<!-- one -->\n```sh\necho hi\n```\n\n```text\n$ not a command? yes it is\n```\n\n```json\n{}\n```\n\n<!-- not-run: needs a cluster -->\n\n````go\npackage main\n```\n````\n"
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got := blocks(t, dir, "x.md")
	if len(got) != 4 {
		t.Fatalf("got %d blocks, want 4: %+v", len(got), got)
	}
	want := []struct {
		info, marker string
		runnable     bool
	}{{"sh", "one", true}, {"text", "", true}, {"json", "", false}, {"go", "not-run: needs a cluster", true}}
	for i, w := range want {
		if got[i].info != w.info || got[i].marker != w.marker || got[i].runnable() != w.runnable {
			t.Errorf("block %d: %+v (runnable %v), want %+v", i, got[i], got[i].runnable(), w)
		}
	}
	if got[3].text != "package main\n```\n" {
		t.Errorf("block 3's text: %q", got[3].text)
	}
}

// TestCITestCommand: .ci/run runs the README's test command, the block
// after <!-- ci:test -->, which runs every package of both modules.
func TestCITestCommand(t *testing.T) {
	root := testutil.RepoRoot(t)
	cmd := testutil.DocBlock(t, "README.md", "ci:test")
	for _, want := range []string{"go test -timeout 30m ./...", "(cd deploy/k8s && go test -timeout 30m ./...)"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("README's ci:test block %q lacks %q", cmd, want)
		}
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "<!-- ci:test -->") {
		t.Error(".ci/run does not read the README's <!-- ci:test --> block")
	}
}

// fragment is a Go fragment of the docs: declarations that compile in a
// package of their own with these imports.
type fragment struct {
	file, name string
	imports    []string
}

// fragments are the Go blocks of the guides that are not whole programs.
// Whole programs (ownsilo:main, a2a:go, the examples) are built and run by
// the tests that name them.
var fragments = []fragment{
	{"README.md", "agent:counter", []string{"context", "strconv", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/agents.md", "agent:counter", []string{"context", "strconv", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/agents.md", "agent:typeinfo", []string{"time", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/agents.md", "agent:ticks", []string{"context", "strconv", "time", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/agents.md", "agent:testing", []string{"context", "strconv", "testing", "time", "google.golang.org/grpc/codes", "github.com/agentsilo/agentsilo/errs", "github.com/agentsilo/agentsilo/grain", "github.com/agentsilo/agentsilo/grain/graintest"}},
	{"docs/state.md", "state:notetaker", []string{"context", "strconv", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/topics.md", "topics:inbox", []string{"context", "strconv", "strings", "time", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/topics.md", "topics:batch-publish", []string{"context", "github.com/agentsilo/agentsilo/client"}},
	{"docs/topics.md", "topics:batch-handler", []string{"context", "github.com/agentsilo/agentsilo/grain"}},
	{"docs/sdk.md", "sdk:dial", []string{"context", "errors", "fmt", "google.golang.org/grpc/codes", "google.golang.org/grpc/status", "github.com/agentsilo/agentsilo/client"}},
	{"docs/sdk.md", "sdk:listings", []string{"context", "fmt", "time", "github.com/agentsilo/agentsilo/client"}},
	{"docs/identity.md", "identity:sdk", []string{"context", "crypto/tls", "os", "golang.org/x/oauth2/clientcredentials", "github.com/agentsilo/agentsilo/client"}},
	{"docs/identity.md", "identity:scopes", []string{"github.com/agentsilo/agentsilo/grain"}},
}

// TestGoFragmentsCompile builds each Go fragment of the guides in a
// package of its own, in a module that uses this checkout through a
// replace, as a reader's module would.
func TestGoFragmentsCompile(t *testing.T) {
	mod := fragmentModule(t)
	writeFragments(t, mod, fragments, "f", "fragment.go")
	cmd := exec.Command("go", "vet", "-mod=mod", "./...")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the guides' Go fragments do not compile: %v\n%s", err, out)
	}
}

// fragmentModule returns a new module that uses this checkout through a
// replace, as a reader's module would.
func fragmentModule(t *testing.T) string {
	t.Helper()
	root := testutil.RepoRoot(t)
	mod := t.TempDir()
	goMod := "module example.com/fragments\n\ngo 1.26.8\n\nrequire github.com/agentsilo/agentsilo v0.0.0\n\nreplace github.com/agentsilo/agentsilo => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return mod
}

// writeFragments writes each of frags, with its imports, as file in a
// directory of its own under mod (prefix and its index).
func writeFragments(t *testing.T, mod string, frags []fragment, prefix, file string) {
	t.Helper()
	for i, f := range frags {
		src := "// " + f.file + " <!-- " + f.name + " -->\npackage fragment\n\nimport (\n"
		for _, imp := range f.imports {
			src += "\t" + fmt.Sprintf("%q", imp) + "\n"
		}
		src += ")\n\n" + testutil.DocBlock(t, f.file, f.name)
		dir := filepath.Join(mod, fmt.Sprintf("%s%d", prefix, i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// testFragments are the Go blocks of the guides that are tests: each is
// run with go test, in a module of its own that uses this checkout.
var testFragments = []fragment{
	{"docs/agents.md", "agent:testing", []string{"context", "strconv", "testing", "time", "google.golang.org/grpc/codes", "github.com/agentsilo/agentsilo/errs", "github.com/agentsilo/agentsilo/grain", "github.com/agentsilo/agentsilo/grain/graintest"}},
}

// TestGoTestFragmentsPass runs the guides' Go blocks that are tests, as a
// reader who copies one into a _test.go file would.
func TestGoTestFragmentsPass(t *testing.T) {
	mod := fragmentModule(t)
	writeFragments(t, mod, testFragments, "t", "fragment_test.go")
	cmd := exec.Command("go", "test", "-mod=mod", "-count=1", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the guides' Go tests do not pass: %v\n%s", err, out)
	}
}

// TestPackageDocsNameFilesThatExist: a package doc that names its files
// (to read as the package's table of contents) names files that exist, in
// the package's directory or, with a slash, from the repository's root;
// so the list cannot go stale.
func TestPackageDocsNameFilesThatExist(t *testing.T) {
	root := testutil.RepoRoot(t)
	fileName := regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_]\.go\b`)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil || f.Doc == nil {
			return err
		}
		dir := filepath.Dir(path)
		for _, name := range fileName.FindAllString(f.Doc.Text(), -1) {
			if strings.HasPrefix(name, "go.") || strings.Contains(name, "://") {
				continue
			}
			candidates := []string{filepath.Join(dir, name)}
			if strings.Contains(name, "/") {
				candidates = append(candidates, filepath.Join(root, name))
			}
			checked++
			found := false
			for _, c := range candidates {
				if _, err := os.Stat(c); err == nil {
					found = true
				}
			}
			if !found {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: the package doc names %s, which does not exist", rel, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no package doc names a file: this test checks nothing")
	}
	t.Logf("%d file names in package docs exist", checked)
}
