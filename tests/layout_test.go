// Package tests holds agentsilo's cross-package tests: the repository's
// layout rules here, and multi-process cluster tests beside them.
package tests

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOnePackageDoc: every package has exactly one package doc comment
// (generated protobuf files aside).
func TestOnePackageDoc(t *testing.T) {
	docs := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, ok := docs[dir]; !ok {
			docs[dir] = nil
		}
		if f.Doc != nil && !strings.HasSuffix(path, ".pb.go") {
			docs[dir] = append(docs[dir], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range docs {
		if len(files) != 1 {
			t.Errorf("package %s has %d package doc comments (%v), want 1", dir, len(files), files)
		}
	}
}

// TestNoEtcdInSDK: the programming model and the client SDK do not link etcd,
// the PostgreSQL driver (or anything of the silo), so an SDK user does not
// link a database server or client.
func TestNoEtcdInSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../grain/...", "../client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.etcd.io/") || strings.HasPrefix(dep, "github.com/jackc/") || strings.HasPrefix(dep, "github.com/hashicorp/memberlist") || strings.HasPrefix(dep, "github.com/a2aproject/") {
			t.Errorf("grain or client depends on %s", dep)
		}
	}
	out, err = exec.Command("go", "list", "-deps", "../client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		// The SDK shares the programming model's message (a
		// client.Message is a grain.Message), so it links grain; never
		// the silo.
		if strings.HasPrefix(dep, "github.com/asynkron/") || dep == "github.com/agentsilo/agentsilo/cluster" {
			t.Errorf("client depends on %s", dep)
		}
	}
}

// TestNoMetricsInGrain: the runtime reports through grain.Observer, and
// the metrics and tracing libraries are imported by cluster (and the SDK's
// tracing by client), not by grain.
func TestNoMetricsInGrain(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "../grain/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/prometheus/") || strings.HasPrefix(dep, "go.opentelemetry.io/") {
			t.Errorf("grain imports %s", dep)
		}
	}
}

// TestDependencyDirections pins which packages may import which, so that the
// file tree keeps showing the architecture: the silo (cluster) wires its
// parts, the parts do not know each other or the silo, nothing imports the
// programs, and the SDK and the programming model link no silo.
func TestDependencyDirections(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/agentsilo/agentsilo/"
	// forbidden[p] lists import paths (relative to the module) that package
	// p and its subpackages may not import, with their subpackages (a path
	// ending in "$" is exact).
	forbidden := map[string][]string{
		"internal/gateway":    {"internal/membership", "internal/transport", "cluster/etcdstore", "cluster$"},
		"internal/membership": {"internal/gateway", "internal/transport", "cluster/etcdstore", "cluster$", "grain"},
		"internal/transport":  {"internal/gateway", "internal/membership", "cluster/etcdstore", "cluster$"},
		"cluster/etcdstore":   {"internal/gateway", "internal/membership", "internal/transport", "cluster$"},
		"grain":               {"cluster", "client", "reminders", "acl", "internal/etcderr", "internal/etcdtest"},
		"client":              {"cluster", "grain/graintest", "reminders", "acl", "internal/etcderr", "internal/etcdtest"},
		"errs":                {"cluster", "client", "grain", "reminders", "acl", "internal"},
		"internal":            {"cluster", "client", "cmd"},
		"acl":                 {"cluster", "client"},
		"reminders":           {"cluster", "client"},
		"a2a":                 {"cluster", "client"},
		"mcp":                 {"cluster", "client"},
		"auth":                {"cluster", "client", "a2a", "mcp", "grain"},
		"topics":              {"cluster", "client"},
		"directory":           {"cluster", "client"},
		"state":               {"cluster", "client"},
		"memory":              {"cluster"},
	}
	// required[p] lists packages p must import: the gateway, A2A and MCP
	// share the one authentication package.
	required := map[string][]string{
		"internal/gateway": {"auth"},
		"a2a":              {"auth"},
		"mcp":              {"auth"},
	}
	// leaves import nothing but the standard library: what checks a name
	// needs no runtime.
	leaves := []string{"internal/names"}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], mod) {
			continue
		}
		if leaf := strings.TrimPrefix(fields[0], mod); slices.Contains(leaves, leaf) {
			for _, imp := range fields[1:] {
				if strings.Contains(strings.Split(imp, "/")[0], ".") {
					t.Errorf("%s, a leaf, imports %s", leaf, imp)
				}
			}
			if _, ok := imports[leaf]; !ok {
				imports[leaf] = nil
			}
		}
		pkg := strings.TrimPrefix(fields[0], mod)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			imports[pkg] = append(imports[pkg], dep)
			if strings.HasPrefix(dep, "cmd/") {
				t.Errorf("%s imports the program %s", pkg, dep)
			}
			for p, bans := range forbidden {
				if pkg != p && !strings.HasPrefix(pkg, p+"/") {
					continue
				}
				for _, ban := range bans {
					exact := strings.HasSuffix(ban, "$")
					ban = strings.TrimSuffix(ban, "$")
					if dep == ban || (!exact && strings.HasPrefix(dep, ban+"/")) {
						t.Errorf("%s imports %s", pkg, dep)
					}
				}
			}
		}
	}
	for _, leaf := range leaves {
		if _, ok := imports[leaf]; !ok {
			t.Errorf("go list listed no package %s", leaf)
		}
	}
	for p, deps := range required {
		if _, ok := imports[p]; !ok {
			t.Errorf("go list listed no package %s", p)
		}
		for _, d := range deps {
			if !slices.Contains(imports[p], d) {
				t.Errorf("%s does not import %s", p, d)
			}
		}
	}
}

// kubernetesModule reports whether a module or package path is Kubernetes'
// or kustomize's: the manifest test's libraries, which live in the module
// of deploy/k8s.
func kubernetesModule(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/kustomize/")
}

// TestSDKDepsHaveNoKubernetes: the SDK links no Kubernetes package, and the
// root module requires no Kubernetes or kustomize module, so a program that
// imports client does not get them in its version selection (with module
// graph pruning, a user's build reads the requirements of agentsilo's
// go.mod, not those of a nested module such as deploy/k8s). The
// sigs.k8s.io/json and sigs.k8s.io/yaml modules are not Kubernetes: the
// embedded etcd's server imports them.
func TestSDKDepsHaveNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Fatalf("go list -deps ../client/... does not list grpc: not a dependency listing?\n%s", out)
	}
	for _, dep := range deps {
		if kubernetesModule(dep) || strings.HasPrefix(dep, "sigs.k8s.io/") {
			t.Errorf("client depends on %s", dep)
		}
	}

	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	reqs := goModRequires(string(data))
	if !slices.Contains(reqs, "google.golang.org/grpc") {
		t.Fatalf("read no requirement of grpc from ../go.mod (read %v): the parser is wrong", reqs)
	}
	for _, r := range reqs {
		if kubernetesModule(r) {
			t.Errorf("the root go.mod requires %s: the Kubernetes libraries belong to the module of deploy/k8s", r)
		}
	}
}

// goModRequires returns the module paths of a go.mod's require directives,
// in both the one-line and the block form.
func goModRequires(gomod string) []string {
	var reqs []string
	block := false
	for line := range strings.Lines(gomod) {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case block && f[0] == ")":
			block = false
		case block:
			reqs = append(reqs, f[0])
		case f[0] == "require" && len(f) == 2 && f[1] == "(":
			block = true
		case f[0] == "require" && len(f) >= 3:
			reqs = append(reqs, f[1])
		}
	}
	return reqs
}

// TestLayoutNoProtoactor: grain runs its activations' mailboxes itself
// (grain/mailbox.go, grain/dispatcher.go); nothing in the module imports
// protoactor-go (whose per-actor process and context were half of an idle
// activation's memory).
func TestLayoutNoProtoactor(t *testing.T) {
	var importers []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), "github.com/asynkron/") {
				rel, _ := filepath.Rel("..", path)
				importers = append(importers, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(importers) != 0 {
		t.Fatalf("files importing github.com/asynkron/: %v, want none", importers)
	}
}

// TestSiloAPIOutOfPublicPackages: what only the silo uses is in
// internal/siloapi, not in grain's API (the placement, client sessions and
// broadcast a silo wires into its runtime, and the clock), and no exported
// name of grain or cluster mentions an internal package's type (a user
// could not name it). SiloConfig holds user settings only: what tests wire
// in (the clock, fault injection) is unexported.
func TestSiloAPIOutOfPublicPackages(t *testing.T) {
	for _, dir := range []string{"grain", "cluster"} {
		names := exportedAPI(t, filepath.Join("..", dir))
		for _, bad := range []string{"Placement", "ServingWaiter", "SessionRouter", "ErrMoved", "Clock", "Timer",
			"Config.Placement", "Config.Sessions", "Config.Broadcast", "Config.Clock",
			"SiloConfig.Clock", "SiloConfig.FaultInjection"} {
			if _, ok := names[bad]; ok {
				t.Errorf("%s exports %s (the silo's own wiring: internal/siloapi, or unexported)", dir, bad)
			}
		}
		for name, internal := range names {
			if internal != "" {
				t.Errorf("%s.%s mentions %s, an internal package", dir, name, internal)
			}
		}
	}
}

// exportedAPI parses the package in dir (tests and files with build tags
// aside) and returns its exported names (Type.Field and Type.Method for
// fields and methods of exported types), each with the internal package it
// mentions, if any.
func exportedAPI(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]string)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if buildTagged(f) {
			continue
		}
		internal := func(n ast.Node) string {
			found := ""
			ast.Inspect(n, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok {
					for _, imp := range f.Imports {
						path := strings.Trim(imp.Path.Value, `"`)
						name := filepath.Base(path)
						if imp.Name != nil {
							name = imp.Name.Name
						}
						if name == x.Name && strings.Contains(path, "/internal/") {
							found = path
						}
					}
				}
				return true
			})
			return found
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if g, ok := recv.(*ast.IndexExpr); ok {
						recv = g.X
					}
					id, ok := recv.(*ast.Ident)
					if !ok || !id.IsExported() {
						continue
					}
					name = id.Name + "." + name
				}
				names[name] = internal(d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							names[s.Name.Name] = internal(s.Type)
							continue
						}
						names[s.Name.Name] = ""
						for _, fld := range st.Fields.List {
							for _, n := range fld.Names {
								if n.IsExported() {
									names[s.Name.Name+"."+n.Name] = internal(fld.Type)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = ""
								if s.Type != nil {
									names[n.Name] = internal(s.Type)
								}
							}
						}
					}
				}
			}
		}
	}
	return names
}

// buildTagged reports whether f has a //go:build line.
func buildTagged(f *ast.File) bool {
	for _, g := range f.Comments {
		for _, c := range g.List {
			if c.Pos() < f.Package && strings.HasPrefix(c.Text, "//go:build") {
				return true
			}
		}
	}
	return false
}

// TestTopicsStorageInternal: topics shows what its users need (names,
// patterns, the Service a silo hosts and its settings); where it keeps
// subscriptions and queues (the Store and its etcd, JetStream and memory
// implementations, their types) is internal/topicstore's.
func TestTopicsStorageInternal(t *testing.T) {
	names := exportedAPI(t, filepath.Join("..", "topics"))
	for _, bad := range []string{"Store", "Item", "AckKey", "QueueEvent", "Registry", "Sub", "StaleError", "ErrStale", "Entry",
		"EtcdStore", "NewEtcdStore", "JetStreamStore", "JetStreamConfig", "OpenJetStream", "DefaultJetStreamConfig", "RedactURLs",
		"Config.Store", "Config.Clock", "Service.Registry"} {
		if _, ok := names[bad]; ok {
			t.Errorf("topics exports %s (its storage: internal/topicstore)", bad)
		}
	}
	for _, want := range []string{"Service", "Config", "New", "Topic", "Pattern", "ParseTopic", "ParsePattern"} {
		if _, ok := names[want]; !ok {
			t.Errorf("topics does not export %s", want)
		}
	}
	store := exportedAPI(t, filepath.Join("..", "internal", "topicstore"))
	for _, want := range []string{"Store", "EtcdStore", "JetStreamStore", "Memory", "Wire"} {
		if _, ok := store[want]; !ok {
			t.Errorf("internal/topicstore does not export %s", want)
		}
	}
}

// internalInAPI lists, for each exported name of the module's public
// packages that mentions a type of one of its internal packages in its
// declaration (a signature, a field, an alias), the first such type. Users
// cannot name those types: they belong to the silo's wiring. The packages
// are read with go/types from the compiler's export data (go list -export),
// so a type is seen wherever it hides: behind an alias, in a promoted
// method, in an exported field of an exported type. tests/, cmd/ and
// examples/ are programs and test harnesses, not API.
func internalInAPI(t *testing.T) map[string]string {
	t.Helper()
	const mod = "github.com/agentsilo/agentsilo"
	out, err := exec.Command("go", "list", "-e", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 {
			exports[f[0]] = f[1]
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s (does it build?)", path)
		}
		return os.Open(exports[path])
	})
	internal := func(p *types.Package) bool {
		return p != nil && (strings.HasPrefix(p.Path(), mod+"/internal/") || p.Path() == mod+"/internal")
	}
	found := map[string]string{}
	for path := range exports {
		rel, ok := strings.CutPrefix(path, mod+"/")
		if !ok || internal(types.NewPackage(path, "")) || strings.HasPrefix(rel, "tests/") || strings.HasPrefix(rel, "cmd/") ||
			strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "proto/") {
			continue
		}
		pkg, err := imp.Import(path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
			continue
		}
		for _, n := range pkg.Scope().Names() {
			o := pkg.Scope().Lookup(n)
			if !o.Exported() {
				continue
			}
			note := func(name string, typ types.Type, top bool) {
				if bad := firstInternal(typ, top, internal); bad != "" {
					found[rel+"."+name] = bad
				}
			}
			note(n, o.Type(), true)
			if tn, ok := o.(*types.TypeName); ok && !tn.IsAlias() {
				ms := types.NewMethodSet(types.NewPointer(o.Type()))
				for i := range ms.Len() {
					if m := ms.At(i).Obj(); m.Exported() {
						note(n+"."+m.Name(), m.Type(), false)
					}
				}
			}
		}
	}
	return found
}

// firstInternal returns the first type of an internal package (as internal
// says) that typ mentions, "" if none. A named type of a public package is
// not looked into (its own declaration is checked on its own), except at the
// top, where a declaration's own struct fields and interface methods are.
func firstInternal(typ types.Type, top bool, internal func(*types.Package) bool) string {
	seen := map[types.Type]bool{}
	var walk func(types.Type, bool) string
	walk = func(typ types.Type, top bool) string {
		if seen[typ] {
			return ""
		}
		seen[typ] = true
		switch typ := typ.(type) {
		case *types.Alias:
			if o := typ.Obj(); internal(o.Pkg()) {
				return o.Pkg().Path() + "." + o.Name()
			}
			return walk(types.Unalias(typ), top)
		case *types.Named:
			if o := typ.Obj(); internal(o.Pkg()) {
				return o.Pkg().Path() + "." + o.Name()
			}
			for i := range typ.TypeArgs().Len() {
				if s := walk(typ.TypeArgs().At(i), false); s != "" {
					return s
				}
			}
			if top {
				return walk(typ.Underlying(), false)
			}
		case *types.Pointer:
			return walk(typ.Elem(), top)
		case *types.Slice:
			return walk(typ.Elem(), false)
		case *types.Array:
			return walk(typ.Elem(), false)
		case *types.Chan:
			return walk(typ.Elem(), false)
		case *types.Map:
			if s := walk(typ.Key(), false); s != "" {
				return s
			}
			return walk(typ.Elem(), false)
		case *types.Signature:
			for _, tuple := range []*types.Tuple{typ.Params(), typ.Results()} {
				for i := range tuple.Len() {
					if s := walk(tuple.At(i).Type(), false); s != "" {
						return s
					}
				}
			}
		case *types.Struct:
			for i := range typ.NumFields() {
				if f := typ.Field(i); f.Exported() {
					if s := walk(f.Type(), false); s != "" {
						return s
					}
				}
			}
		case *types.Interface:
			for i := range typ.NumMethods() {
				if m := typ.Method(i); m.Exported() {
					if s := walk(m.Type(), false); s != "" {
						return s
					}
				}
			}
		}
		return ""
	}
	return walk(typ, top)
}

// TestNoInternalTypesInPublicAPI: no exported name of a public package
// mentions an internal package's type (users could not name it).
func TestNoInternalTypesInPublicAPI(t *testing.T) {
	found := internalInAPI(t)
	for name, typ := range found {
		t.Errorf("%s mentions %s, an internal package's type: users cannot name it", name, typ)
	}
	if _, ok := found["topics.Config"]; ok {
		t.Error("topics.Config mentions an internal type")
	}
}

// TestNoGRPCTestPackagesInProduction: no file but a test imports gRPC's
// test packages (google.golang.org/grpc/test/..., such as bufconn): they
// are made for tests, not for a silo's own connections (auth.InProcess is
// a listener of its own, on in-memory pipes).
func TestNoGRPCTestPackagesInProduction(t *testing.T) {
	var importers []string
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "data" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(p, "google.golang.org/grpc/test/") {
				rel, _ := filepath.Rel("..", path)
				importers = append(importers, filepath.ToSlash(rel)+" imports "+p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d files: the walk is wrong", files)
	}
	for _, i := range importers {
		t.Error(i)
	}
}

// TestLayoutDoc: docs/layout.md names every package of the module (go list
// ./...), and every path it names exists. A package is named by a row
// whose first cell is its path, or by a mention in a row's second cell,
// relative to the row's path (the internal/ row's `clock` is
// internal/clock) or, if it has a slash, whole (`internal/topicstore`).
func TestLayoutDoc(t *testing.T) {
	data, err := os.ReadFile("../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/agentsilo/agentsilo"
	documented := map[string]bool{}
	rows := 0
	for line := range strings.Lines(string(data)) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 4 {
			continue
		}
		rows++
		paths := backticked(cells[1])
		for _, p := range paths {
			p = strings.TrimSuffix(p, "/")
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(p))); err != nil {
				t.Errorf("docs/layout.md names %s, which does not exist", p)
			}
			documented[p] = true
			for _, m := range backticked(cells[2]) {
				m = strings.TrimSuffix(m, "/")
				documented[p+"/"+m] = true
				if strings.Contains(m, "/") {
					documented[m] = true
				}
			}
		}
	}
	if rows < 10 {
		t.Fatalf("read %d rows of docs/layout.md's table: the parser is wrong", rows)
	}
	pkgs := 0
	for _, path := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(path, mod+"/")
		if !ok {
			continue
		}
		pkgs++
		if !documented[rel] {
			t.Errorf("docs/layout.md does not name the package %s", rel)
		}
	}
	if pkgs < 30 {
		t.Fatalf("go list listed %d packages: not a listing?", pkgs)
	}
}

// backticked returns the `quoted` words of s.
func backticked(s string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(s, "`")
		if !ok {
			return out
		}
		w, after, ok := strings.Cut(rest, "`")
		if !ok {
			return out
		}
		out = append(out, w)
		s = after
	}
}
