package tests

import (
	"flag"
	"fmt"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

var updateAPI = flag.Bool("update-api", false, "write the exported API to testdata/api.txt instead of comparing with it")

// apiFile is the exported API of the module's public packages as released
// last: one line per exported identifier, field and method, in the
// format of Go's own api files. A change to the API changes this file in
// the same commit, with a CHANGELOG.md entry that says how to move.
const apiFile = "testdata/api.txt"

// TestExportedAPI reports every change of the exported API against
// testdata/api.txt: what was added and what was removed or changed. Run
// `go test ./tests -run TestExportedAPI -update-api` to accept a change
// made on purpose, and say in CHANGELOG.md what changed and how to move.
func TestExportedAPI(t *testing.T) {
	cur, sizes := moduleAPI(t)
	if *updateAPI {
		if err := os.WriteFile(apiFile, []byte(strings.Join(cur, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, p := range slices.Sorted(maps.Keys(sizes)) {
		t.Logf("%-50s %4d exported identifiers", p, sizes[p])
	}
	b, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatalf("%v: run `go test ./tests -run TestExportedAPI -update-api` to write it", err)
	}
	old := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	added, removed := diffLines(old, cur)
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	var sb strings.Builder
	for _, l := range removed {
		fmt.Fprintf(&sb, "\n- %s", l)
	}
	for _, l := range added {
		fmt.Fprintf(&sb, "\n+ %s", l)
	}
	t.Errorf("the exported API changed (%d removed or changed, %d added):%s\n\nIf on purpose: run `go test ./tests -run TestExportedAPI -update-api`, and say in CHANGELOG.md what changed and how to move.", len(removed), len(added), sb.String())
}

// diffLines returns the lines of cur not in old, and of old not in cur.
func diffLines(old, cur []string) (added, removed []string) {
	in := func(ls []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range ls {
			m[l] = true
		}
		return m
	}
	o, c := in(old), in(cur)
	for _, l := range cur {
		if !o[l] {
			added = append(added, l)
		}
	}
	for _, l := range old {
		if !c[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// publicPackage reports whether a package of the module is part of its
// public API: not internal, not a command, not a test or an example.
func publicPackage(p *packages.Package) bool {
	rel := strings.TrimPrefix(p.PkgPath, "github.com/agentsilo/agentsilo")
	rel = strings.TrimPrefix(rel, "/")
	if p.Name == "main" || rel == "" && p.Name == "" {
		return false
	}
	for _, part := range strings.Split(rel, "/") {
		switch part {
		case "internal", "tests", "examples", "cmd", "testdata":
			return false
		}
	}
	return true
}

// moduleAPI lists the exported API of the module's public packages, and
// the number of exported identifiers (with fields and methods) of each.
func moduleAPI(t *testing.T) ([]string, map[string]int) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: root}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sizes := map[string]int{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if !publicPackage(p) || p.Types == nil {
			continue
		}
		name := strings.TrimPrefix(p.PkgPath, "github.com/agentsilo/agentsilo/")
		qual := func(other *types.Package) string {
			if other == p.Types {
				return ""
			}
			return other.Name()
		}
		emit := func(s string) {
			lines = append(lines, "pkg "+name+", "+s)
			sizes[name]++
		}
		scope := p.Types.Scope()
		for _, n := range scope.Names() {
			obj := scope.Lookup(n)
			if !obj.Exported() {
				continue
			}
			switch o := obj.(type) {
			case *types.Func:
				emit("func " + strings.TrimPrefix(types.ObjectString(o, qual), "func "))
			case *types.Const:
				emit("const " + o.Name() + " " + types.TypeString(o.Type(), qual))
			case *types.Var:
				emit("var " + o.Name() + " " + types.TypeString(o.Type(), qual))
			case *types.TypeName:
				typeLines(o, qual, emit)
			}
		}
	}
	sort.Strings(lines)
	return lines, sizes
}

// typeLines emits a type, its exported fields or interface methods, and
// its exported methods.
func typeLines(o *types.TypeName, qual types.Qualifier, emit func(string)) {
	head := "type " + o.Name()
	if named, ok := o.Type().(*types.Named); ok && named.TypeParams().Len() > 0 {
		var ps []string
		for i := range named.TypeParams().Len() {
			tp := named.TypeParams().At(i)
			ps = append(ps, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
		}
		head += "[" + strings.Join(ps, ", ") + "]"
	}
	if o.IsAlias() {
		emit(head + " = " + types.TypeString(types.Unalias(o.Type()), qual))
		return
	}
	switch u := o.Type().Underlying().(type) {
	case *types.Struct:
		emit(head + " struct")
		for i := range u.NumFields() {
			if f := u.Field(i); f.Exported() {
				if f.Embedded() {
					emit(head + ", embedded " + types.TypeString(f.Type(), qual))
				} else {
					emit(head + ", " + f.Name() + " " + types.TypeString(f.Type(), qual))
				}
			}
		}
	case *types.Interface:
		emit(head + " interface")
		for i := range u.NumExplicitMethods() {
			if m := u.ExplicitMethod(i); m.Exported() {
				emit(head + ", " + m.Name() + strings.TrimPrefix(types.TypeString(m.Type(), qual), "func"))
			}
		}
		for i := range u.NumEmbeddeds() {
			emit(head + ", embedded " + types.TypeString(u.EmbeddedType(i), qual))
		}
	default:
		emit(head + " " + types.TypeString(u, qual))
	}
	if named, ok := o.Type().(*types.Named); ok {
		for i := range named.NumMethods() {
			m := named.Method(i)
			if !m.Exported() {
				continue
			}
			sig := m.Type().(*types.Signature)
			recv := types.TypeString(sig.Recv().Type(), qual)
			emit("method (" + recv + ") " + m.Name() + strings.TrimPrefix(types.TypeString(sig, qual), "func"))
		}
	}
}
