package tests

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestRunYourOwnAgents does what the README's "Running your own silo"
// says, with its commands as written: a new module beside the checkout,
// whose main (the README's, which is examples/greeter's) is built against
// this checkout through a replace, runs as one silo
// that serves Greeter and no demo agents, and as a three-silo cluster
// reached through any gateway.
func TestRunYourOwnAgents(t *testing.T) {
	buildBinaries(t)
	mod := ownModule(t)
	run := strings.Split(strings.TrimSpace(testutil.DocBlock(t, "README.md", "ownsilo:run")), "\n")
	if len(run) != 3 || run[1] != "./mysilo &" || !strings.HasPrefix(run[2], "go run github.com/agentsilo/agentsilo/cmd/client ask Greeter:g world") {
		t.Fatalf("README ownsilo:run is not build, start, ask Greeter:g world: %q", run)
	}
	sh(t, mod, run[0])
	bin := filepath.Join(mod, "mysilo")

	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "silo ") || !strings.Contains(string(out), "replaced by") {
		t.Fatalf("--version: %q, %v", out, err)
	}

	// One silo, on the embedded etcd.
	one := startOwnSilo(t, bin, "one", filepath.Join(mod, "data-one"))
	if out, errOut, code := runClient(t, one.gateway, "ask", "Greeter:g", "world"); code != 0 || out != "hello, world (greeting 1)" {
		t.Fatalf("ask Greeter: exit %d, %q, %q", code, out, errOut)
	}
	if _, errOut, code := runClient(t, one.gateway, "ask", "Echo:e", "hi"); code != 3 || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("the demo agents are served without --demo: exit %d, %q", code, errOut)
	}
	one.stop(t)

	// Three silos: the first runs the embedded etcd the others use.
	s0 := startOwnSilo(t, bin, "s0", filepath.Join(mod, "data-0"))
	s1 := startOwnSilo(t, bin, "s1", "", "--etcd-endpoints", s0.etcd, "--join", s0.gossip)
	s2 := startOwnSilo(t, bin, "s2", "", "--etcd-endpoints", s0.etcd, "--join", s0.gossip)
	deadline := time.Now().Add(time.Minute)
	for {
		out, _, code := runClient(t, s2.gateway, "members")
		if code == 0 && strings.Contains(out, "s0") && strings.Contains(out, "s1") && strings.Contains(out, "s2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("three members never seen: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, s := range []*ownSilo{s0, s1, s2} {
		out, errOut, code := runClient(t, s.gateway, "ask", "Greeter:cluster", "silo")
		if want := "hello, silo (greeting " + string(rune('1'+i)) + ")"; code != 0 || out != want {
			t.Fatalf("ask Greeter through %s: exit %d, %q (want %q), %q", s.name, code, out, want, errOut)
		}
	}
	for _, s := range []*ownSilo{s2, s1, s0} {
		s.stop(t)
	}
}

type ownSilo struct {
	name, gateway, gossip, etcd string
	cmd                         *exec.Cmd
	stderr                      *bytes.Buffer
}

// startOwnSilo starts bin as silo name on fresh loopback ports, with an
// embedded etcd in dataDir unless extra points it at another etcd, and
// waits until its gateway answers.
func startOwnSilo(t *testing.T, bin, name, dataDir string, extra ...string) *ownSilo {
	t.Helper()
	s := &ownSilo{name: name, gateway: freePort(t), gossip: freePort(t), etcd: testutil.FreeAddrPair(t), stderr: new(bytes.Buffer)}
	args := []string{"--name", name, "--gateway-addr", s.gateway, "--http-addr", "",
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", s.gossip, "--lease-ttl", "3s"}
	if dataDir != "" {
		args = append(args, "--data-dir", dataDir, "--embedded-etcd-addr", s.etcd)
	}
	s.cmd = exec.Command(bin, append(args, extra...)...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, code := runClient(t, s.gateway, "members"); code == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("silo %s never served:\n%s", name, s.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownModule makes the README's module of one's own: its commands
// (ownsilo:init) as written, beside a checkout (here this one, wherever it
// is), and its main.go (ownsilo:main, which is examples/greeter's). It
// returns the module's directory.
func ownModule(t *testing.T) string {
	t.Helper()
	mainGo := testutil.DocBlock(t, "README.md", "ownsilo:main")
	example, err := os.ReadFile("../examples/greeter/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), strings.TrimSpace(mainGo[strings.Index(mainGo, "// Greeter"):])) {
		t.Fatal("the README's main.go is not examples/greeter/main.go's")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	initCmds := testutil.DocBlock(t, "README.md", "ownsilo:init")
	if !strings.Contains(initCmds, "=../agentsilo") {
		t.Fatalf("README ownsilo:init does not replace the module with ../agentsilo:\n%s", initCmds)
	}
	sh(t, parent, strings.ReplaceAll(initCmds, "=../agentsilo", "="+root))
	mod := filepath.Join(parent, "mysilo")
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	return mod
}

// TestOwnSiloImage follows the Kubernetes guide's path to an image of
// one's own silo (docs/kubernetes.md), as far as it goes without Docker:
// the README's module, the guide's vendoring commands as written, then
// the Dockerfile's build step (its one RUN that builds, with the guide's
// build arguments) on a copy of the module alone, as the build context
// is, offline and with an empty module cache. The binaries it makes run.
// Not tested here: the docker build itself and the distroless stage.
func TestOwnSiloImage(t *testing.T) {
	mod := ownModule(t)
	sh(t, mod, "go mod tidy")
	sh(t, mod, testutil.DocBlock(t, "docs/kubernetes.md", "ownsilo:vendor"))
	if _, err := os.Stat(filepath.Join(mod, "vendor", "github.com", "agentsilo", "agentsilo", "cmd", "client")); err != nil {
		t.Fatalf("go mod vendor left out the client: %v", err)
	}

	// The guide's docker build: its Dockerfile and build arguments.
	docker := shellWords(t, strings.TrimSpace(strings.ReplaceAll(testutil.DocBlock(t, "docs/kubernetes.md", "ownsilo:docker"), "\\\n", " ")))
	args := map[string]string{}
	for i := 0; i < len(docker); i++ {
		switch docker[i] {
		case "-f":
			i++
			if docker[i] != "../agentsilo/Dockerfile" {
				t.Fatalf("the guide builds with %s, want ../agentsilo/Dockerfile", docker[i])
			}
		case "--build-arg":
			i++
			k, v, _ := strings.Cut(docker[i], "=")
			args[k] = v
		}
	}
	if docker[len(docker)-1] != "." || args["MAIN"] == "" || args["CLIENT"] == "" {
		t.Fatalf("the guide's docker build: %q", docker)
	}

	// The Dockerfile's build step, without its cache mounts.
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var step string
	for _, in := range strings.Split(strings.ReplaceAll(string(dockerfile), "\\\n", " "), "\n") {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			step = strings.TrimPrefix(in, "RUN ")
		}
	}
	for strings.HasPrefix(step, "--") {
		_, step, _ = strings.Cut(step, " ")
		step = strings.TrimSpace(step)
	}
	if !strings.Contains(step, "-o /out/silo") {
		t.Fatalf("no build step in the Dockerfile: %q", step)
	}
	out := t.TempDir()
	step = strings.ReplaceAll(step, "/out/", out+"/")

	// The guide's .dockerignore, and what a module one has worked in holds
	// besides its sources: a silo's etcd data, version control.
	sh(t, mod, testutil.DocBlock(t, "docs/kubernetes.md", "ownsilo:dockerignore"))
	for _, f := range []string{"data/member/snap/db", "data-two/member/wal/0.wal", ".git/HEAD", "web/node_modules/x/index.js"} {
		if err := os.MkdirAll(filepath.Join(mod, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// COPY . . : the module alone, without the checkout it replaces, as
	// its .dockerignore leaves it.
	ctx := t.TempDir()
	copyContext(t, mod, ctx, readDockerignore(t, filepath.Join(mod, ".dockerignore")))
	for _, gone := range []string{"data", "data-two", ".git", "web/node_modules"} {
		if _, err := os.Stat(filepath.Join(ctx, gone)); err == nil {
			t.Errorf("the build context has %s: the guide's .dockerignore lets it in", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(ctx, "vendor", "modules.txt")); err != nil {
		t.Fatalf("the build context lacks vendor/: %v", err)
	}
	cmd := exec.Command("bash", "-e", "-c", step)
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOMODCACHE="+t.TempDir(), "GOWORK=off",
		"MAIN="+args["MAIN"], "CLIENT="+args["CLIENT"], "TARGETOS=", "TARGETARCH=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build step on the vendored module: %v\n%s", err, msg)
	}
	if v, err := exec.Command(filepath.Join(out, "silo"), "--version").Output(); err != nil || !strings.HasPrefix(string(v), "silo ") {
		t.Errorf("the image's silo --version: %q, %v", v, err)
	}
	if v, err := exec.Command(filepath.Join(out, "client"), "version").Output(); err != nil || !strings.HasPrefix(string(v), "client ") {
		t.Errorf("the image's client version: %q, %v", v, err)
	}
}

// sh runs script with bash -e in dir, failing t with its output if it
// fails.
func sh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-e", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// stop ends the silo with SIGTERM and checks that it exits 0.
func (s *ownSilo) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(os.Interrupt)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("silo %s: %v\n%s", s.name, err, s.stderr)
	}
}

// runClient runs the client program against gateway.
func runClient(t *testing.T, gateway string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bins.client, append([]string{"--addr", gateway, "--timeout", "10s"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out.String()), errOut.String(), code
}

// TestDockerignore: the repository's .dockerignore keeps out of the image's
// build context what it must not carry (version control, a local silo's
// etcd data, built binaries, node_modules), and keeps in every file the
// build reads: go.mod, go.sum, and the Go and embedded files of every
// package of the module the silo and the client are built from.
func TestDockerignore(t *testing.T) {
	rules := readDockerignore(t, "../.dockerignore")
	for _, out := range []string{".git/HEAD", "data/member/snap/db", "data-s0/member/wal/0.wal", "examples/greeter/data/x",
		"bin/silo", "tests/a2ajs/node_modules/x/index.js", "tests/mcpjs/node_modules/y.js"} {
		if !dockerIgnored(rules, out) {
			t.Errorf(".dockerignore lets %s into the build context", out)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}} {{join .GoFiles " "}} {{join .EmbedFiles " "}}{{end}}{{end}}`, "./cmd/silo", "./cmd/client")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dir, err := filepath.Rel(root, f[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range f[1:] {
			needed = append(needed, filepath.ToSlash(filepath.Join(dir, name)))
		}
	}
	if len(needed) < 100 {
		t.Fatalf("the build reads %d files, by go list: the listing is wrong", len(needed))
	}
	for _, in := range needed {
		if dockerIgnored(rules, in) {
			t.Errorf(".dockerignore keeps %s, which the image's build reads, out of the build context", in)
		}
	}
}

// A dockerRule is one line of a .dockerignore: its pattern as a regular
// expression over slash-separated paths relative to the context, and
// whether it excludes (or, with !, includes again).
type dockerRule struct {
	re      *regexp.Regexp
	exclude bool
}

// readDockerignore reads a .dockerignore's rules, as Docker reads them: a
// pattern matches a path or any directory above it; * and ? match within
// a path element, ** any number of elements; the last rule that matches
// a path decides.
func readDockerignore(t *testing.T, path string) []dockerRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules []dockerRule
	for line := range strings.Lines(string(data)) {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		r := dockerRule{exclude: true}
		if after, ok := strings.CutPrefix(p, "!"); ok {
			r.exclude, p = false, strings.TrimSpace(after)
		}
		p = strings.TrimPrefix(pathpkg.Clean("/"+p), "/")
		var re strings.Builder
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		r.re = regexp.MustCompile("^" + re.String() + "(/.*)?$")
		rules = append(rules, r)
	}
	return rules
}

// dockerIgnored reports whether rules keep rel (slash-separated, relative
// to the context) out of the context.
func dockerIgnored(rules []dockerRule, rel string) bool {
	out := false
	for _, r := range rules {
		if r.re.MatchString(rel) {
			out = r.exclude
		}
	}
	return out
}

// copyContext copies the directory src to dst, leaving out what rules
// keep out of a build context.
func copyContext(t *testing.T, src, dst string, rules []dockerRule) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." {
			return err
		}
		if dockerIgnored(rules, filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
