package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// initExceptions are the files, outside commands and generated code, that
// may declare func init(), each with the reason.
var initExceptions = map[string]string{
	"llm/steps_testhooks.go": "built only with the agentsilo_testhooks tag, for process tests: it sets the hook that holds a model turn from the environment of the silo under test, which no other code reaches",
}

// TestNoInit: no package declares func init(), apart from commands (cmd/:
// their command tables), generated code (the protobuf descriptors) and the
// files listed in initExceptions. How the silo assembles its parts is
// explicit: package cluster makes each part and wires into it what the
// silo gives it (siloapi.Wire, topicstore.Wire, clock.Wire, inbox.Wire,
// through the Slots that the public Configs embed), so a reader follows
// calls rather than hooks that init functions set as an import's side
// effect.
func TestNoInit(t *testing.T) {
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "cmd" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "init" {
				continue
			}
			seen[rel] = true
			if _, ok := initExceptions[rel]; !ok {
				t.Errorf("%s: package %s declares func init(): make what it sets explicit (a constructor, or a typed setter that its user calls, as cluster wires the silo's parts), or list the file in initExceptions with the reason", rel, f.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range slices.Sorted(maps.Keys(initExceptions)) {
		if !seen[rel] {
			t.Errorf("initExceptions lists %s, which declares no func init() now: remove it from the list", rel)
		}
		if initExceptions[rel] == "" {
			t.Errorf("initExceptions lists %s without a reason", rel)
		}
	}
}
