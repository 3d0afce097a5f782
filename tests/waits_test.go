package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWaitsHaveDeadlines: no test waits for a condition on t.Context()
// alone (a select on t.Context().Done(), a WaitX(t.Context(), ...) call).
// t.Context() ends when the test does, not at a deadline, so such a wait
// never gives up: a hung test runs until go test's -timeout kills the
// whole binary, instead of failing with what it waited for. Bound it with
// testutil.WaitContext(t) (or a context.WithTimeout of t.Context()).
func TestWaitsHaveDeadlines(t *testing.T) {
	var found []string
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "data" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		note := func(n ast.Node, what string) {
			found = append(found, filepath.ToSlash(rel)+":"+strconv.Itoa(fset.Position(n.Pos()).Line)+": "+what)
		}
		var stack []ast.Node // n's ancestors, n last
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			switch n := n.(type) {
			case *ast.SelectStmt:
				for _, c := range n.Body.List {
					if x := received(c.(*ast.CommClause)); x != nil {
						if sel, ok := x.(*ast.CallExpr); ok && len(sel.Args) == 0 {
							if done, ok := sel.Fun.(*ast.SelectorExpr); ok && done.Sel.Name == "Done" && testContext(done.X) && (inLoop(stack) || !timed(n)) {
								note(c, "a select waits on "+ctxName(done.X)+".Done() alone")
							}
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !strings.HasPrefix(sel.Sel.Name, "Wait") {
					return true
				}
				for _, a := range n.Args {
					if testContext(a) {
						note(n, sel.Sel.Name+" waits on "+ctxName(a)+" alone")
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d test files: the walk is wrong", files)
	}
	for _, f := range found {
		t.Errorf("%s, which ends with the test, not at a deadline: bound it with testutil.WaitContext(t)", f)
	}
}

// received returns what a select's case receives from, nil for a send or
// the default.
func received(c *ast.CommClause) ast.Expr {
	var x ast.Expr
	switch s := c.Comm.(type) {
	case *ast.ExprStmt:
		x = s.X
	case *ast.AssignStmt:
		x = s.Rhs[0]
	}
	if u, ok := x.(*ast.UnaryExpr); ok && u.Op == token.ARROW {
		return u.X
	}
	return nil
}

// timed reports whether one of s's cases receives from a timer: time.After
// or a channel named C (a time.Timer's or time.Ticker's), so that a select
// not in a loop gives up when it fires.
func timed(s *ast.SelectStmt) bool {
	for _, c := range s.Body.List {
		switch x := received(c.(*ast.CommClause)).(type) {
		case *ast.SelectorExpr:
			if x.Sel.Name == "C" {
				return true
			}
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "After" {
				return true
			}
		}
	}
	return false
}

// inLoop reports whether the last of stack is in a loop of its function.
func inLoop(stack []ast.Node) bool {
	for i := len(stack) - 2; i >= 0; i-- {
		switch stack[i].(type) {
		case *ast.ForStmt, *ast.RangeStmt:
			return true
		case *ast.FuncLit, *ast.FuncDecl:
			return false
		}
	}
	return false
}

// testContext reports whether e is t.Context() (of a t, b or tb: a test's).
func testContext(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Context" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && (id.Name == "t" || id.Name == "b" || id.Name == "tb")
}

// ctxName is how e, a testContext, reads: "t.Context()".
func ctxName(e ast.Expr) string {
	call := e.(*ast.CallExpr)
	return call.Fun.(*ast.SelectorExpr).X.(*ast.Ident).Name + ".Context()"
}
