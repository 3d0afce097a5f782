package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportedErrorsHaveCodes: every exported error variable of a public
// package carries its gRPC code (an errs error), so that status.Code and
// the SDK's exit codes read it: none is made with errors.New or
// fmt.Errorf. The exceptions are markers that errors.Is matches on errors
// carrying codes of their own (what was not run, not delivered).
func TestExportedErrorsHaveCodes(t *testing.T) {
	markers := map[string]bool{
		"grain.ErrNotRun":           true,
		"transport.ErrNotDelivered": true,
	}
	var found int
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "internal" || d.Name() == "tests" || d.Name() == "examples") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() || !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) {
						continue
					}
					found++
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok {
						continue
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					pkg, _ := sel.X.(*ast.Ident)
					if pkg == nil || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
						continue
					}
					if q := f.Name.Name + "." + name.Name; !markers[q] {
						rel, _ := filepath.Rel("..", path)
						t.Errorf("%s: %s is made with %s.%s: make it an errs error with its code", filepath.ToSlash(rel), q, pkg.Name, sel.Sel.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d exported error variables: the walk is wrong", found)
	}
}
