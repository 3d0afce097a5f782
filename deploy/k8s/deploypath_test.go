package k8s_test

// These tests follow the deploy path as the README and docs/operations.md
// write it: the image they build is the one the kustomization runs, the
// API keys come from make-keys.sh (and the base does not build without
// them), the keys it prints authenticate against a real silo, and the
// bundled etcd admits only the silos.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// tree is a copy of this directory at deploy/k8s under a temporary root, as
// a user's checkout has it after running make-keys.sh.
type tree struct {
	root    string            // stands for the repository root
	dir     string            // root/deploy/k8s
	keyFile []byte            // what make-keys.sh wrote to base/keys.json
	keys    map[string]string // principal -> the key make-keys.sh printed
}

// newTree copies this directory's kustomizations and scripts (leaving out
// any keys.json and tls/ a developer made here), runs make-certs.sh in the
// copy and, given principals, make-keys.sh, as the docs say.
func newTree(t *testing.T, principals ...string) *tree {
	t.Helper()
	tr := &tree{root: t.TempDir()}
	tr.dir = filepath.Join(tr.root, "deploy", "k8s")
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && strings.HasPrefix(d.Name(), ".") || filepath.ToSlash(path) == "base/tls" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(tr.dir, path), 0o755)
		}
		if d.Name() == "keys.json" || strings.HasSuffix(d.Name(), ".go") || d.Name() == "go.mod" || d.Name() == "go.sum" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tr.dir, path), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(tr.dir, "make-certs.sh")).CombinedOutput(); err != nil {
		t.Fatalf("make-certs.sh: %v\n%s", err, out)
	}
	if len(principals) > 0 {
		tr.keys = tr.makeKeys(t, principals...)
		if tr.keyFile, err = os.ReadFile(filepath.Join(tr.dir, "base", "keys.json")); err != nil {
			t.Fatalf("make-keys.sh wrote no base/keys.json: %v", err)
		}
	}
	return tr
}

// makeKeys runs the copy's make-keys.sh with args and returns the keys it
// printed, by principal.
func (tr *tree) makeKeys(t *testing.T, args ...string) map[string]string {
	t.Helper()
	stdout, stderr, err := tr.run(args...)
	if err != nil {
		t.Fatalf("make-keys.sh %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	keys := map[string]string{}
	for line := range strings.Lines(stdout) {
		principal, key, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if !ok {
			t.Fatalf("make-keys.sh printed %q: want PRINCIPAL<tab>KEY lines", line)
		}
		keys[principal] = key
	}
	return keys
}

// run runs the copy's make-keys.sh (as a program, so its mode and #! line
// count) with args.
func (tr *tree) run(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(tr.dir, "make-keys.sh"), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestKeysMustBeMade: the repository ships no key file, so the
// kustomizations do not build until make-keys.sh has written one (a silo
// with a placeholder would refuse every call instead); the script writes a
// file the silo's format accepts, holding the SHA-256 of the keys it
// prints; it refuses bad names and to replace a key file, and adds to one
// with -a.
func TestKeysMustBeMade(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := git("ls-files", "--", "deploy/k8s")
	if err != nil {
		t.Fatalf("git ls-files: %v\n%s", err, out)
	}
	if !strings.Contains(out, "deploy/k8s/make-keys.sh") {
		t.Fatalf("git ls-files lists no deploy/k8s/make-keys.sh:\n%s", out)
	}
	for f := range strings.FieldsSeq(out) {
		if filepath.Base(f) == "keys.json" {
			t.Errorf("the repository holds %s: key files are made by make-keys.sh, never shipped", f)
		}
	}
	if out, err := git("check-ignore", "-q", "deploy/k8s/base/keys.json"); err != nil {
		t.Errorf("git does not ignore deploy/k8s/base/keys.json, so a user's key file could be committed: %v %s", err, out)
	}

	// Without a key file, no kustomization builds, and the error names it.
	tr := newTree(t)
	for dir := range variants {
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		_, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(tr.dir, dir))
		if err == nil || !strings.Contains(err.Error(), "keys.json") {
			t.Errorf("%s builds without a key file (error: %v), want an error naming keys.json", dir, err)
		}
	}

	// Names the silo would refuse are refused, and nothing is written.
	for _, bad := range []string{"bad name", "-x", ":admins", "alice:", "alice:admins,", "alice:a,,b", "alice:a:b", strings.Repeat("a", 129)} {
		if _, stderr, err := tr.run(bad); err == nil {
			t.Errorf("make-keys.sh %q succeeded, want a refusal", bad)
		} else if stderr == "" {
			t.Errorf("make-keys.sh %q: refused without a word", bad)
		}
	}
	keysPath := filepath.Join(tr.dir, "base", "keys.json")
	if _, err := os.Stat(keysPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused make-keys.sh left %s behind (%v)", keysPath, err)
	}

	keys := tr.makeKeys(t, "alice", "ops:admins,sre")
	first, err := os.ReadFile(keysPath)
	if err != nil {
		t.Fatal(err)
	}
	checkMadeKeys(t, first, keys, map[string][]string{"alice": nil, "ops": {"admins", "sre"}})
	if info, err := os.Stat(keysPath); err != nil {
		t.Error(err)
	} else if info.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s: mode %v, want readable by its owner only", keysPath, info.Mode())
	}

	// A second run must not replace the file: that would lock out alice
	// and ops.
	if _, _, err := tr.run("bob"); err == nil {
		t.Errorf("make-keys.sh replaced an existing key file")
	}
	if now, _ := os.ReadFile(keysPath); !bytes.Equal(now, first) {
		t.Errorf("a refused make-keys.sh changed the key file:\n%s", now)
	}

	// -a adds keys (a new principal, and alice's next key), keeping the others.
	more := tr.makeKeys(t, "-a", "bob", "alice:admins")
	both, err := os.ReadFile(keysPath)
	if err != nil {
		t.Fatal(err)
	}
	var f keyFile
	if err := strictJSON(both, &f); err != nil {
		t.Fatalf("key file after -a: %v\n%s", err, both)
	}
	if len(f.Keys) != 4 || f.Keys[0].SHA256 != sha256Hex(keys["alice"]) || f.Keys[1].SHA256 != sha256Hex(keys["ops"]) ||
		f.Keys[2].SHA256 != sha256Hex(more["bob"]) || f.Keys[3].SHA256 != sha256Hex(more["alice"]) ||
		f.Keys[3].Principal != "alice" || !slices.Equal(f.Keys[3].Groups, []string{"admins"}) {
		t.Errorf("key file after -a bob alice:admins:\n%s\nwant the first two keys, then bob's and alice's new one", both)
	}
	checkKeys(t, both)

	// And the base builds with it, carrying it in the Secret.
	checkKeySecret(t, render(t, filepath.Join(tr.dir, "base")), both)
}

// checkMadeKeys: data is a key file in the silo's format holding, for each
// printed key, its SHA-256 with its principal and groups, and nothing else.
func checkMadeKeys(t *testing.T, data []byte, keys map[string]string, groups map[string][]string) {
	t.Helper()
	checkKeys(t, data)
	var f keyFile
	if err := strictJSON(data, &f); err != nil {
		t.Fatalf("key file: %v\n%s", err, data)
	}
	if len(keys) != len(groups) || len(f.Keys) != len(groups) {
		t.Fatalf("make-keys.sh printed %d keys and wrote %d, want %d:\n%s", len(keys), len(f.Keys), len(groups), data)
	}
	for _, k := range f.Keys {
		key, ok := keys[k.Principal]
		switch {
		case !ok:
			t.Errorf("key file has a key for %q, for whom none was printed", k.Principal)
		case !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key):
			t.Errorf("the key printed for %s, %q, is not 64 hex digits (32 random bytes)", k.Principal, key)
		case k.SHA256 != sha256Hex(key):
			t.Errorf("key file: %s's sha256 %s is not the SHA-256 of the key printed", k.Principal, k.SHA256)
		case !slices.Equal(k.Groups, groups[k.Principal]):
			t.Errorf("key file: %s's groups %q, want %q", k.Principal, k.Groups, groups[k.Principal])
		}
		if strings.Contains(string(data), key) {
			t.Errorf("the key file holds %s's key itself", k.Principal)
		}
	}
}

// TestMadeKeysAuthenticate runs the real silo on a key file make-keys.sh
// wrote (and added to with -a), and calls it with the real client and the
// keys the script printed: each authenticates as its principal with its
// groups; another key does not. The silo takes make-certs.sh's peer
// certificate and gossip key too.
func TestMadeKeysAuthenticate(t *testing.T) {
	tr := newTree(t, "alice", "ops:admins")
	more := tr.makeKeys(t, "-a", "bob")
	silo, client := buildRoot(t, "./cmd/silo"), buildRoot(t, "./cmd/client")

	dir := t.TempDir()
	gateway, httpAddr := freePort(t), freePort(t)
	var stderr bytes.Buffer
	cmd := exec.Command(silo,
		"--name", "keys", "--data-dir", filepath.Join(dir, "data"), "--examples",
		"--gateway-addr", gateway, "--http-addr", httpAddr,
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--embedded-etcd-addr", freeConsecutivePorts(t),
		"--auth-file", filepath.Join(tr.dir, "base", "keys.json"),
		// And what make-certs.sh wrote, as the base passes it.
		"--peer-tls-cert", filepath.Join(tr.dir, "base", "tls", "peer.crt"),
		"--peer-tls-key", filepath.Join(tr.dir, "base", "tls", "peer.key"),
		"--peer-tls-ca", filepath.Join(tr.dir, "base", "tls", "peer-ca.crt"),
		"--peer-tls-name", "silo-peers",
		"--gossip-key-file", filepath.Join(tr.dir, "base", "tls", "gossip.key"))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	})
	waitReady(t, httpAddr, exited, &stderr)

	for _, c := range []struct {
		key  string
		args []string
		code int
		want string
	}{
		{tr.keys["alice"], []string{"ask", "Echo:x", "hi"}, 0, "hi"},
		{more["bob"], []string{"ask", "Echo:y", "hello"}, 0, "hello"},
		// Only group admins may read the ACL's rules: ops's group came
		// through the file.
		{tr.keys["ops"], []string{"acl", "rules"}, 0, ""},
		{tr.keys["alice"], []string{"acl", "rules"}, 4, "error: PermissionDenied"},
		{strings.Repeat("0", 64), []string{"ask", "Echo:x", "hi"}, 4, "error: Unauthenticated"},
	} {
		cl := exec.Command(client, append([]string{"--addr", gateway, "--api-key", c.key, "--timeout", "20s"}, c.args...)...)
		var out, errOut bytes.Buffer
		cl.Stdout, cl.Stderr = &out, &errOut
		err := cl.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
			t.Errorf("client %s (key %.8s…): exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(c.args, " "), c.key, code, out.String(), errOut.String(), c.code, c.want)
		}
	}

	stopped = true
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("silo after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// waitReady waits until the silo's /readyz answers 200, failing the test if
// the process exits first or the test's deadline comes near.
func waitReady(t *testing.T, httpAddr string, exited <-chan error, stderr *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("silo exited before it was ready: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("silo not ready: %v\n%s", ctx.Err(), stderr.String())
		case <-tick.C:
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freeConsecutivePorts returns 127.0.0.1:P with P and P+1 free: the
// embedded etcd serves clients on P and peers on P+1.
func freeConsecutivePorts(t *testing.T) string {
	t.Helper()
	for range 50 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		l1.Close()
		if err == nil {
			l2.Close()
			return "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatal("no two consecutive free ports")
	return ""
}

// baseImage is the image the base runs: its kustomization's images: entry
// for the silo container's image.
func baseImage(t *testing.T, tr *tree) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tr.dir, "base", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag, Digest string }
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || k.Images[0].NewTag == "" || k.Images[0].Digest != "" {
		t.Fatalf("base/kustomization.yaml images: %+v, want one entry with a newTag", k.Images)
	}
	img := k.Images[0]
	name := img.Name
	if img.NewName != "" {
		name = img.NewName
	}
	return name + ":" + img.NewTag
}

// TestImageAgreesWithDocs: the image the README, docs/operations.md, the
// Dockerfile and the base's kustomization tell you to build is the one the
// base runs; every mention
// of that image names the same tag; and the overlay of operations.md,
// which runs the image pushed to a registry, renders with the image its
// `docker push` pushed.
func TestImageAgreesWithDocs(t *testing.T) {
	tr := newTree(t, "alice")
	want := baseImage(t, tr)
	repo, _, _ := strings.Cut(want, ":")

	o := render(t, filepath.Join(tr.dir, "base"))
	if got := container(t, o.statefulSets["silo"], "silo").Image; got != want {
		t.Errorf("the base's silo runs %s, want its images: entry %s", got, want)
	}

	docs := map[string]string{}
	for _, f := range []string{"README.md", "docs/operations.md", "Dockerfile", "deploy/k8s/base/kustomization.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(data)
		if build := "docker build -t " + want + " ."; !strings.Contains(docs[f], build) {
			t.Errorf("%s does not say %q, the image deploy/k8s/base runs", f, build)
		}
		mention := regexp.MustCompile(regexp.QuoteMeta(repo) + `:[A-Za-z0-9_.-]+`)
		for _, m := range mention.FindAllString(docs[f], -1) {
			if m != want {
				t.Errorf("%s names the image %s, but the base runs %s", f, m, want)
			}
		}
	}

	// operations.md: tag and push the image to a registry, and run it
	// from an overlay of your own at the repository's root.
	ops := docs["docs/operations.md"]
	pushed := regexp.MustCompile(`(?m)^docker push (\S+)$`).FindAllStringSubmatch(ops, -1)
	if len(pushed) != 1 {
		t.Fatalf("docs/operations.md has %d `docker push IMAGE` lines, want 1", len(pushed))
	}
	if tag := "docker tag " + want + " " + pushed[0][1]; !strings.Contains(ops, tag) {
		t.Errorf("docs/operations.md does not say %q before pushing", tag)
	}
	overlay := ""
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(ops, -1) {
		if strings.Contains(block[1], "kind: Kustomization") && strings.Contains(block[1], "images:") {
			overlay = block[1]
		}
	}
	if overlay == "" {
		t.Fatal("docs/operations.md has no overlay example (a yaml block with kind: Kustomization and images:)")
	}
	my := filepath.Join(tr.root, "my-cluster")
	if err := os.MkdirAll(my, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(my, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	o = render(t, my)
	if got := container(t, o.statefulSets["silo"], "silo").Image; got != pushed[0][1] {
		t.Errorf("the overlay of docs/operations.md runs %s, want the image pushed, %s", got, pushed[0][1])
	}
	checkKeySecret(t, o, tr.keyFile)
}

// TestDockerfile: the image builds the silo from the build argument MAIN,
// by default the agentsilo silo, into the entry point the StatefulSet runs,
// and the client beside it.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Instructions, with continuation lines joined and comments dropped.
	var instrs []string
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur += l + " "
			continue
		}
		instrs = append(instrs, cur+line)
		cur = ""
	}
	args := map[string]string{}
	var builds []string
	entry := ""
	for _, in := range instrs {
		switch {
		case strings.HasPrefix(in, "ARG "):
			name, value, _ := strings.Cut(strings.TrimPrefix(in, "ARG "), "=")
			args[name] = value
		case strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build"):
			builds = append(builds, in)
		case strings.HasPrefix(in, "ENTRYPOINT "):
			entry = strings.TrimPrefix(in, "ENTRYPOINT ")
		}
	}
	if args["MAIN"] != "./cmd/silo" || args["CLIENT"] != "./cmd/client" {
		t.Errorf("Dockerfile: ARG MAIN=%q, CLIENT=%q; want ./cmd/silo and ./cmd/client as defaults", args["MAIN"], args["CLIENT"])
	}
	for _, pkg := range []string{args["MAIN"], args["CLIENT"]} {
		cmd := exec.Command("go", "list", "-f", "{{.Name}}", pkg)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "main" {
			t.Errorf("Dockerfile: %s is not a main package of the root module: %v %s", pkg, err, out)
		}
	}
	if len(builds) != 1 || !strings.Contains(builds[0], `-o /out/silo "${MAIN}"`) || !strings.Contains(builds[0], `-o /out/client "${CLIENT}"`) {
		t.Errorf("Dockerfile: want one RUN building \"${MAIN}\" to /out/silo and \"${CLIENT}\" to /out/client, have %q", builds)
	}
	if !slices.Contains(instrs, "COPY --from=build /out/silo /out/client /usr/local/bin/") {
		t.Errorf("Dockerfile: the final stage does not copy /out/silo and /out/client to /usr/local/bin/")
	}
	tr := newTree(t, "alice")
	o := render(t, filepath.Join(tr.dir, "base"))
	c := container(t, o.statefulSets["silo"], "silo")
	if want := fmt.Sprintf("[%q]", c.Command[0]); len(c.Command) != 1 || entry != want {
		t.Errorf("Dockerfile ENTRYPOINT %s, StatefulSet command %q: want the same program", entry, c.Command)
	}
}

// etcdPolicyProblems: NetworkPolicies isolate the etcd pods, admit pods
// of StatefulSet silo, and no others, to etcd's client port, and pods of
// StatefulSet etcd, and no others, to its peer port. An admitted peer is
// a pod selector in the policy's namespace that requires every label of the
// StatefulSet's own selector and matches no other StatefulSet's pods.
func etcdPolicyProblems(o *objects) []string {
	etcd, silo := o.statefulSets["etcd"], o.statefulSets["silo"]
	if etcd == nil || silo == nil {
		return []string{"no StatefulSets etcd and silo"}
	}
	var problems []string
	var c *corev1.Container
	for i := range etcd.Spec.Template.Spec.Containers {
		if cc := &etcd.Spec.Template.Spec.Containers[i]; cc.Name == "etcd" {
			c = cc
		}
	}
	if c == nil {
		return []string{"StatefulSet etcd has no container etcd"}
	}
	only := map[string]*appsv1.StatefulSet{"client": silo, "peer": etcd}
	for name := range only {
		if _, ok := containerPort(c, intstr.FromString(name), corev1.ProtocolTCP); !ok {
			problems = append(problems, "etcd has no TCP port named "+name)
		}
	}
	admitted := map[string]bool{}
	isolated := false
	podLabels := labels.Set(etcd.Spec.Template.Labels)
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		if len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			isolated = true
		}
		for i, rule := range np.Spec.Ingress {
			// The etcd ports this rule opens.
			var ports []string
			if len(rule.Ports) == 0 {
				for _, cp := range c.Ports {
					ports = append(ports, cp.Name)
				}
			}
			for _, p := range rule.Ports {
				proto := corev1.ProtocolTCP
				if p.Protocol != nil {
					proto = *p.Protocol
				}
				n := 0
				for _, cp := range c.Ports {
					cpProto := cp.Protocol
					if cpProto == "" {
						cpProto = corev1.ProtocolTCP
					}
					switch {
					case cpProto != proto:
					case p.Port == nil,
						p.Port.Type == intstr.String && p.Port.StrVal == cp.Name,
						p.Port.Type == intstr.Int && p.EndPort == nil && p.Port.IntVal == cp.ContainerPort,
						p.Port.Type == intstr.Int && p.EndPort != nil && p.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *p.EndPort:
						ports = append(ports, cp.Name)
						n++
					}
				}
				if n == 0 {
					problems = append(problems, fmt.Sprintf("NetworkPolicy %s rule %d: port %v names no port of etcd", np.Name, i, p.Port))
				}
			}
			for _, port := range ports {
				want := only[port]
				if want == nil {
					continue
				}
				if len(rule.From) == 0 {
					problems = append(problems, fmt.Sprintf("NetworkPolicy %s rule %d admits every source to etcd's %s port, want pods of %s only", np.Name, i, port, want.Name))
				}
				for _, from := range rule.From {
					if admits(o, from, want) {
						admitted[port] = true
					} else {
						problems = append(problems, fmt.Sprintf("NetworkPolicy %s rule %d admits %s to etcd's %s port, want pods of %s only", np.Name, i, peerString(from), port, want.Name))
					}
				}
			}
		}
	}
	if !isolated {
		problems = append(problems, "no NetworkPolicy isolates the etcd pods: any pod may use etcd, which has no authentication")
	}
	for _, port := range []string{"client", "peer"} {
		if !admitted[port] {
			problems = append(problems, fmt.Sprintf("no NetworkPolicy admits the pods of %s to etcd's %s port", only[port].Name, port))
		}
	}
	return problems
}

// admits reports whether peer stands for exactly the pods of s: a pod
// selector alone (this namespace), requiring every label of s's selector,
// matching s's pods and no other StatefulSet's.
func admits(o *objects, peer networkingv1.NetworkPolicyPeer, s *appsv1.StatefulSet) bool {
	if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
		return false
	}
	for k, v := range s.Spec.Selector.MatchLabels {
		if peer.PodSelector.MatchLabels[k] != v {
			return false
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil {
		return false
	}
	for _, other := range o.statefulSets {
		if sel.Matches(labels.Set(other.Spec.Template.Labels)) != (other.Name == s.Name) {
			return false
		}
	}
	return true
}

func peerString(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.PodSelector != nil {
		parts = append(parts, "pods "+metav1.FormatLabelSelector(p.PodSelector))
	}
	if p.NamespaceSelector != nil {
		parts = append(parts, "namespaces "+metav1.FormatLabelSelector(p.NamespaceSelector))
	}
	if p.IPBlock != nil {
		parts = append(parts, "addresses "+p.IPBlock.CIDR)
	}
	return strings.Join(parts, " in ")
}

// TestEtcdPolicyCheck: etcdPolicyProblems passes the base's etcd
// NetworkPolicy and catches each way of opening etcd further, or of
// shutting the silos out.
func TestEtcdPolicyCheck(t *testing.T) {
	tr := newTree(t, "alice")
	o := render(t, filepath.Join(tr.dir, "base"))
	if p := etcdPolicyProblems(o); len(p) > 0 {
		t.Fatalf("the base's etcd NetworkPolicy: %q", p)
	}
	if _, ok := o.netpols["etcd"]; !ok {
		t.Fatal("the base has no NetworkPolicy etcd")
	}
	// rule finds the ingress rule of NetworkPolicy etcd that names port.
	rule := func(np *networkingv1.NetworkPolicy, port string) *networkingv1.NetworkPolicyIngressRule {
		for i := range np.Spec.Ingress {
			for _, p := range np.Spec.Ingress[i].Ports {
				if p.Port != nil && p.Port.String() == port {
					return &np.Spec.Ingress[i]
				}
			}
		}
		t.Fatalf("NetworkPolicy etcd has no rule for port %s", port)
		return nil
	}
	siloSel := o.statefulSets["silo"].Spec.Selector.DeepCopy()
	for _, m := range []struct {
		what   string
		mutate func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy
		want   string
	}{
		{"no policy", func(*networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy { return nil }, "isolates the etcd pods"},
		{"client port from anyone", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			rule(np, "client").From = nil
			return np
		}, "admits every source to etcd's client port"},
		{"client port from every namespace's silos", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			rule(np, "client").From[0].NamespaceSelector = &metav1.LabelSelector{}
			return np
		}, "to etcd's client port"},
		{"client port from an address block", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			r := rule(np, "client")
			r.From = append(r.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}})
			return np
		}, "admits addresses 10.0.0.0/8"},
		{"client port from every pod of part-of agentsilo", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			rule(np, "client").From[0].PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "agentsilo"}}
			return np
		}, "to etcd's client port"},
		{"peer port from the silos", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			rule(np, "peer").From[0].PodSelector = siloSel
			return np
		}, "to etcd's peer port"},
		{"every port from the silos", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			rule(np, "client").Ports = nil
			return np
		}, "to etcd's peer port"},
		{"port by number range over both", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			end := int32(2380)
			p := intstr.FromInt32(2379)
			rule(np, "client").Ports[0] = networkingv1.NetworkPolicyPort{Port: &p, EndPort: &end}
			return np
		}, "to etcd's peer port"},
		{"silos shut out", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			r := rule(np, "client")
			r.From[0].PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nothing"}}
			return np
		}, "admits the pods of silo to etcd's client port"},
		{"egress only", func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			np.Spec.Ingress = nil
			return np
		}, "isolates the etcd pods"},
	} {
		mutated := *o
		mutated.netpols = map[string]*networkingv1.NetworkPolicy{}
		for name, np := range o.netpols {
			mutated.netpols[name] = np
		}
		if np := m.mutate(o.netpols["etcd"].DeepCopy()); np != nil {
			mutated.netpols["etcd"] = np
		} else {
			delete(mutated.netpols, "etcd")
		}
		problems := etcdPolicyProblems(&mutated)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, m.want) }) {
			t.Errorf("%s: problems %q, want one saying %q", m.what, problems, m.want)
		}
	}
}
