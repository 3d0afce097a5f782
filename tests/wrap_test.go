package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestWrapsKeepCauses: no error is formatted into another error's message
// with %v or %s, which keeps its words and loses it: errors.Is and
// errors.As could no longer see the cause (a context's deadline, a
// sentinel, an etcd error). Wrap it with %w (fmt.Errorf, errs.New and the
// module's other formatting helpers keep every %w operand) or with
// errs.Wrap. The test type-checks every file of the module, its tests and
// the files behind the agentsilo_testhooks tag included, generated files
// aside, and checks every call of fmt.Errorf and of any function that
// takes a format string and its arguments (a parameter named format,
// then ...any) and returns an error.
func TestWrapsKeepCauses(t *testing.T) {
	sites, checked := lostCauses(t)
	for _, s := range sites {
		t.Error(s)
	}
	if checked < 500 {
		t.Fatalf("checked %d formatting calls: the walk is wrong", checked)
	}
}

// lostCauses returns, for every formatting call of the module that formats
// an error with %v or %s, "file:line: ...", and how many formatting calls
// it checked. It type-checks each package, then its in-package tests with
// it, then its external tests, from source, reading what they import from
// the compiler's export data (go list -export builds it, tests aside: the
// test variants go vet would compile are not needed for the types of a
// call's arguments, and a test's type errors, a package it imports seeing
// the package under test's plain build, are let be).
func lostCauses(t *testing.T) ([]string, int) {
	t.Helper()
	errorType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{} // files already checked
	var sites []string
	checked := 0
	inspect := func(fset *token.FileSet, files []*ast.File, info *types.Info) {
		for _, f := range files {
			name := fset.Position(f.Pos()).Filename
			if seen[name] || ast.IsGenerated(f) {
				continue
			}
			seen[name] = true
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fi, ok := formatter(info, call)
				if !ok {
					return true
				}
				checked++
				tv := info.Types[call.Args[fi]]
				if tv.Value == nil || tv.Value.Kind() != constant.String || call.Ellipsis.IsValid() {
					return true // a format that is not a constant, or args...: nothing to read
				}
				args := call.Args[fi+1:]
				for _, v := range formatVerbs(constant.StringVal(tv.Value)) {
					if v.arg >= len(args) || v.verb != 'v' && v.verb != 's' {
						continue
					}
					if at := info.TypeOf(args[v.arg]); at == nil || !types.Implements(at, errorType) {
						continue
					}
					pos := fset.Position(args[v.arg].Pos())
					rel, _ := filepath.Rel(root, pos.Filename)
					sites = append(sites, fmt.Sprintf("%s:%d: %s formats the error %s with %%%c, which loses it as a cause: use %%w (or errs.Wrap)",
						filepath.ToSlash(rel), pos.Line, types.ExprString(call.Fun), types.ExprString(args[v.arg]), v.verb))
				}
				return true
			})
		}
	}
	for _, tags := range []string{"", "agentsilo_testhooks"} {
		pkgs, exports := listForTypes(t, tags)
		for _, p := range pkgs {
			fset := token.NewFileSet()
			parse := func(names []string) []*ast.File {
				var files []*ast.File
				for _, name := range names {
					f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
					if errors.Is(err, fs.ErrNotExist) {
						t.Logf("%s went away since go list listed it", name)
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					files = append(files, f)
				}
				return files
			}
			fresh := func(names ...[]string) bool {
				for _, n := range slices.Concat(names...) {
					if !seen[filepath.Join(p.Dir, n)] {
						return true
					}
				}
				return false
			}
			if !fresh(p.GoFiles, p.TestGoFiles, p.XTestGoFiles) {
				continue
			}
			imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
				if exports[path] == "" {
					return nil, fmt.Errorf("no export data for %s (does it build?)", path)
				}
				return os.Open(exports[path])
			})
			check := func(path string, files []*ast.File, imp types.Importer, strict bool) (*types.Package, *types.Info) {
				info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
				conf := types.Config{Importer: imp, Sizes: types.SizesFor("gc", runtime.GOARCH)}
				if !strict {
					conf.Error = func(error) {}
				}
				pkg, err := conf.Check(path, fset, files, info)
				if err != nil && strict {
					t.Errorf("type-check %s: %v", path, err)
				}
				return pkg, info
			}
			// The package alone, which must type-check, then with its
			// in-package tests.
			files := parse(p.GoFiles)
			if len(files) > 0 {
				_, info := check(p.ImportPath, files, imp, true)
				inspect(fset, files, info)
			}
			var tested *types.Package
			if len(p.TestGoFiles) > 0 || len(p.XTestGoFiles) > 0 {
				files = append(files, parse(p.TestGoFiles)...)
				var info *types.Info
				tested, info = check(p.ImportPath, files, imp, false)
				inspect(fset, files, info)
			}
			if len(p.XTestGoFiles) > 0 {
				xfiles := parse(p.XTestGoFiles)
				ximp := importerFunc(func(path string) (*types.Package, error) {
					if path == p.ImportPath && tested != nil {
						return tested, nil
					}
					return imp.Import(path)
				})
				_, info := check(p.ImportPath+"_test", xfiles, ximp, false)
				inspect(fset, xfiles, info)
			}
		}
	}
	slices.Sort(sites)
	return sites, checked
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// A listedPackage is one package of the module as go list lists it.
type listedPackage struct {
	ImportPath, Dir                    string
	GoFiles, TestGoFiles, XTestGoFiles []string
	Imports, TestImports, XTestImports []string
	Module                             *struct{ Main bool }
}

// listForTypes lists the module's packages under the build tags given, and
// the export data of every package they and their tests import.
func listForTypes(t *testing.T, tags string) ([]*listedPackage, map[string]string) {
	t.Helper()
	golist := func(args ...string) []byte {
		if tags != "" {
			args = append([]string{args[0], "-tags=" + tags}, args[1:]...)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	var pkgs []*listedPackage
	deps := map[string]bool{}
	out := golist("list", "-e", "-json=ImportPath,Dir,GoFiles,TestGoFiles,XTestGoFiles,Imports,TestImports,XTestImports,Module", "./...")
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		pkgs = append(pkgs, &p)
		for _, imp := range slices.Concat([]string{p.ImportPath}, p.Imports, p.TestImports, p.XTestImports) {
			if imp != "C" && imp != "unsafe" {
				deps[imp] = true
			}
		}
	}
	exports := map[string]string{}
	out = golist(append([]string{"list", "-e", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, slices.Sorted(maps.Keys(deps))...)...)
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 {
			exports[f[0]] = f[1]
		}
	}
	return pkgs, exports
}

// formatter reports whether call formats an error, and the index of its
// format argument: a call of fmt.Errorf, or of a function (or closure) that
// returns an error alone and whose last two parameters are a
// string named format and a ...any.
func formatter(info *types.Info, call *ast.CallExpr) (int, bool) {
	sig, ok := info.TypeOf(call.Fun).(*types.Signature)
	if !ok || !sig.Variadic() || sig.Params().Len() < 2 {
		return 0, false
	}
	res := sig.Results()
	if res.Len() != 1 || !types.Identical(res.At(0).Type(), types.Universe.Lookup("error").Type()) {
		return 0, false
	}
	params := sig.Params()
	n := params.Len()
	format, rest := params.At(n-2), params.At(n-1)
	if b, ok := format.Type().Underlying().(*types.Basic); !ok || b.Kind() != types.String {
		return 0, false
	}
	if s, ok := rest.Type().(*types.Slice); !ok || !types.Identical(s.Elem(), types.NewInterfaceType(nil, nil)) {
		return 0, false
	}
	if format.Name() != "format" && calleeName(call) != "fmt.Errorf" {
		return 0, false
	}
	if len(call.Args) < n-1 {
		return 0, false
	}
	return n - 2, true
}

// calleeName returns how call names its function, for messages.
func calleeName(call *ast.CallExpr) string { return types.ExprString(call.Fun) }

// A formatVerb is one verb of a format string and the index (among the
// arguments after the format) of the operand it formats.
type formatVerb struct {
	verb rune
	arg  int
}

// formatVerbs reads a fmt format string: its verbs in order with their
// operands, following fmt's rules for flags, * widths and precisions, and
// explicit argument indexes ([n]).
func formatVerbs(format string) []formatVerb {
	var verbs []formatVerb
	arg := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		// flags
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		index := func() {
			if i < len(format) && format[i] == '[' {
				j := strings.IndexByte(format[i:], ']')
				if j < 0 {
					return
				}
				n := 0
				for _, c := range format[i+1 : i+j] {
					n = n*10 + int(c-'0')
				}
				arg = n - 1
				i += j + 1
			}
		}
		number := func() {
			index()
			if i < len(format) && format[i] == '*' {
				arg++
				i++
				return
			}
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
		}
		number() // width
		if i < len(format) && format[i] == '.' {
			i++
			number() // precision
		}
		index()
		if i >= len(format) {
			break
		}
		if format[i] == '%' {
			continue
		}
		verbs = append(verbs, formatVerb{verb: rune(format[i]), arg: arg})
		arg++
	}
	return verbs
}

// TestFormatVerbs pins the format reader the guard above relies on.
func TestFormatVerbs(t *testing.T) {
	for _, tc := range []struct {
		format string
		want   []formatVerb
	}{
		{"a %v b %w", []formatVerb{{'v', 0}, {'w', 1}}},
		{"100%% %s", []formatVerb{{'s', 0}}},
		{"%*d %.*f %v", []formatVerb{{'d', 1}, {'f', 3}, {'v', 4}}},
		{"%[2]v %[1]s %v", []formatVerb{{'v', 1}, {'s', 0}, {'v', 1}}},
		{"%-8.3q|%+v|%#x", []formatVerb{{'q', 0}, {'v', 1}, {'x', 2}}},
	} {
		if got := formatVerbs(tc.format); !slices.Equal(got, tc.want) {
			t.Errorf("formatVerbs(%q) = %v, want %v", tc.format, got, tc.want)
		}
	}
}
