package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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

// TestErrorVocabulary: errs is the one vocabulary of errors. Every
// exported error variable of a public package that names an errs sentinel
// under another name is that sentinel itself (ErrX = errs.ErrY, not an
// alias of an alias nor a new error), and says so in its doc comment
// ("ErrX is errs.ErrY"); docs/errors.md lists every errs sentinel, every
// such alias and every other exported error variable of a public package.
func TestErrorVocabulary(t *testing.T) {
	doc, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := func(name string) bool { return strings.Contains(string(doc), "`"+name+"`") }
	sentinels := 0
	aliases := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "internal" || d.Name() == "tests" ||
			d.Name() == "examples" || d.Name() == "cmd" || d.Name() == "deploy" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
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
					q := f.Name.Name + "." + name.Name
					if !listed(q) {
						t.Errorf("%s: docs/errors.md does not list %s", rel, q)
					}
					if f.Name.Name == "errs" {
						sentinels++
						continue
					}
					sel, ok := vs.Values[i].(*ast.SelectorExpr)
					if !ok {
						continue // an error of its own (errs.New, errors.New)
					}
					pkg, _ := sel.X.(*ast.Ident)
					if pkg == nil || !strings.HasPrefix(sel.Sel.Name, "Err") {
						continue
					}
					if pkg.Name != "errs" {
						t.Errorf("%s: %s is %s.%s, an alias of an alias: make it errs' sentinel itself", rel, q, pkg.Name, sel.Sel.Name)
						continue
					}
					aliases++
					target := "errs." + sel.Sel.Name
					var text string
					for _, c := range []*ast.CommentGroup{vs.Doc, vs.Comment, g.Doc} {
						if c != nil {
							text += " " + strings.Join(strings.Fields(c.Text()), " ")
						}
					}
					if !strings.Contains(text, name.Name+" is "+target) && !strings.Contains(text, "It is "+target) {
						t.Errorf("%s: the doc comment of %s does not say it is %s (%q)", rel, q, target, strings.TrimSpace(text))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sentinels < 10 || aliases < 10 {
		t.Fatalf("found %d sentinels and %d aliases: the walk is wrong", sentinels, aliases)
	}
}
