// Package tests holds agentsilo's cross-package tests: the repository's
// layout rules here, and multi-process cluster tests beside them.
package tests

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
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
		if strings.HasPrefix(dep, "go.etcd.io/") || strings.HasPrefix(dep, "github.com/jackc/") || strings.HasPrefix(dep, "github.com/hashicorp/memberlist") {
			t.Errorf("grain or client depends on %s", dep)
		}
	}
	out, err = exec.Command("go", "list", "-deps", "../client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/asynkron/") || dep == "github.com/agentsilo/agentsilo/grain" || dep == "github.com/agentsilo/agentsilo/cluster" {
			t.Errorf("client depends on %s", dep)
		}
	}
}

// TestNoMetricsInGrain: the runtime reports through grain.Observer, and
// the metrics and tracing libraries are imported by cluster (and the SDK's
// tracing by client), not by grain. (protoactor-go itself links
// Prometheus and OpenTelemetry, so this checks grain's own imports.)
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
