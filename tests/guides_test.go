package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// docShell runs script with bash -e in dir, with the silo and client
// binaries first on PATH (as `silo` and `client`) and env added, bounded
// by a few minutes; it returns stdout and stderr, failing t if the script
// fails.
func docShell(t *testing.T, dir, script string, env ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bins.client)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s\n: %v\nstdout:\n%s\nstderr:\n%s", script, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// TestClusterGuide runs the cluster guide's two blocks (docs/cluster.md)
// as one shell script, as written but for the binaries (built already)
// and the addresses (free ports on the same loopback addresses, so that it
// runs beside other tests): three silos become members, a call goes
// through any gateway, and the stop block ends every silo and leaves
// nothing behind.
func TestClusterGuide(t *testing.T) {
	buildBinaries(t)
	l, err := net.Listen("tcp", "127.0.0.10:0")
	testutil.Need(t, err == nil, "loopback addresses 127.0.0.10 and up (as Linux has)")
	l.Close()

	start := testutil.DocBlock(t, "docs/cluster.md", "cluster:start")
	stop := testutil.DocBlock(t, "docs/cluster.md", "cluster:stop")
	const build = "go build -o bin/ ./cmd/silo ./cmd/client\n"
	if !strings.HasPrefix(start, build) {
		t.Fatalf("docs/cluster.md cluster:start does not begin with %q", build)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{bins.silo, bins.client} {
		if err := os.Symlink(b, filepath.Join(dir, "bin", filepath.Base(b))); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.TrimPrefix(start, build) + stop

	// Each address a free port on its own host; the embedded etcd's next
	// port (its peer port) free too.
	addrs := map[string]string{}
	for _, a := range regexp.MustCompile(`127\.0\.0\.\d+:\d+`).FindAllString(script, -1) {
		if _, ok := addrs[a]; ok {
			continue
		}
		host, _, _ := net.SplitHostPort(a)
		if a == "127.0.0.1:2379" {
			addrs[a] = testutil.FreeAddrPair(t)
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addrs[a] = l.Addr().String()
		l.Close()
	}
	script = regexp.MustCompile(`127\.0\.0\.\d+:\d+`).ReplaceAllStringFunc(script, func(a string) string { return addrs[a] })

	out, _ := docShell(t, dir, script)
	for _, want := range []string{"s0 ", "s1 ", "s2 ", "\nhello\n", "Echo:dev:a"} {
		if !strings.Contains(out, want) {
			t.Errorf("the cluster guide printed\n%s\nwant %q in it", out, want)
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the cluster guide left %v behind", left)
	}
}

// TestCLIStdinGuide runs the CLI guide's stdin examples (docs/cli.md) in
// a git repository with a change, against a silo with the demo agents.
func TestCLIStdinGuide(t *testing.T) {
	buildBinaries(t)
	testutil.NeedCommand(t, "git", "git")
	p := startSilo(t, t.TempDir())
	dir := t.TempDir()
	docShell(t, dir, "git init -q . && printf 'one\\n' > f && git add f && git -c user.name=t -c user.email=t@example.com commit -qm one && printf 'two\\n' > f && printf '# notes\\nsome notes\\n' > notes.md")
	lines := strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/cli.md", "cli:stdin")), "\n")
	if len(lines) != 2 {
		t.Fatalf("docs/cli.md cli:stdin: %q", lines)
	}
	out, _ := docShell(t, dir, lines[0], "AGENTSILO_ADDR="+p.gateway)
	if !strings.Contains(out, "-one\n+two") {
		t.Errorf("%s printed %q, want the diff", lines[0], out)
	}
	out, _ = docShell(t, dir, lines[1], "AGENTSILO_ADDR="+p.gateway)
	if out != "# notes\nsome notes\n" {
		t.Errorf("%s printed %q, want notes.md", lines[1], out)
	}
}

// TestACLGuide runs the ACL administration block of docs/security.md, as
// written, against a fresh silo whose gateway takes API keys, with OPS_KEY
// a key of group admins.
func TestACLGuide(t *testing.T) {
	buildBinaries(t)
	sum := func(key string) string { h := sha256.Sum256([]byte(key)); return hex.EncodeToString(h[:]) }
	keys := filepath.Join(t.TempDir(), "keys.json")
	doc := fmt.Sprintf(`{"keys": [{"sha256": %q, "principal": "ops", "groups": ["admins"]}, {"sha256": %q, "principal": "alice"}]}`, sum("ops-key"), sum("alice-key"))
	if err := os.WriteFile(keys, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startSilo(t, t.TempDir(), "--auth-file", keys)
	block := testutil.DocBlock(t, "docs/security.md", "security:acl-admin")
	out, _ := docShell(t, t.TempDir(), block, "AGENTSILO_ADDR="+p.gateway, "OPS_KEY=ops-key")
	t.Logf("docs/security.md security:acl-admin printed:\n%s", out)
	for _, want := range []string{
		"none",
		"allowed: rule 1 at position 1: acme:support-* -> group:premium -> Message,Read",
		"removed rule 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the ACL block printed\n%s\nwant %q in it", out, want)
		}
	}
	// What the block did is in force: alice is in premium, and rule 1 is
	// gone again.
	rules, _, code := p.cli("--api-key", "ops-key", "acl", "rules")
	if code != 0 || strings.Contains(rules, "support-*") {
		t.Errorf("acl rules after the block: exit %d, %q", code, rules)
	}
}

// TestDocumentedSiloFlags: every silo command line of the guides that no
// other test runs parses: each flag exists and takes the value given (the
// silo checks its flags before --version).
func TestDocumentedSiloFlags(t *testing.T) {
	buildBinaries(t)
	for _, b := range []struct{ file, name string }{
		{"docs/a2a.md", "a2a:retention"},
	} {
		for _, line := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, b.file, b.name)), "\n") {
			words := shellWords(t, line)
			if len(words) < 3 || strings.Join(words[:3], " ") != "go run ./cmd/silo" {
				t.Fatalf("%s %s: %q is not a silo command", b.file, b.name, line)
			}
			args := append(words[3:], "--version")
			if out, err := exec.Command(bins.silo, args...).CombinedOutput(); err != nil {
				t.Errorf("%s %s: silo %s: %v\n%s", b.file, b.name, strings.Join(args, " "), err, out)
			}
		}
	}
}

// curl does what a documented curl command line does: words are its
// arguments (-X METHOD, -H 'Name: value', -d BODY, -s, and the URL).
func curl(t *testing.T, words []string) string {
	t.Helper()
	method, body, url := "GET", "", ""
	header := http.Header{}
	for i := 0; i < len(words); i++ {
		switch w := words[i]; w {
		case "-X":
			i++
			method = words[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(words[i], ":")
			header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d":
			i++
			body = words[i]
			if method == "GET" {
				method = "POST"
			}
		case "-s":
		default:
			if strings.HasPrefix(w, "-") || url != "" {
				t.Fatalf("curl %q: this test does not know %q", words, w)
			}
			url = w
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("curl %q: %s %v\n%s", words, resp.Status, err, b)
	}
	return string(b)
}

// TestA2AGuide runs the A2A guide's commands (docs/a2a.md) against `silo
// --demo` with A2A on, at a free address instead of 127.0.0.1:9090: the
// cards, SendMessage over JSON-RPC and HTTP+JSON with curl, and an agent of
// type A2A that calls an A2A agent (the silo's own Echo, instead of the
// guide's weather agent).
func TestA2AGuide(t *testing.T) {
	buildBinaries(t)
	serve := strings.TrimSpace(testutil.DocBlock(t, "docs/a2a.md", "a2a:serve"))
	words := shellWords(t, serve)
	if len(words) != 6 || strings.Join(words[:4], " ") != "go run ./cmd/silo --demo" || words[4] != "--a2a-addr" || words[5] != "127.0.0.1:9090" {
		t.Fatalf("docs/a2a.md a2a:serve is %q; this test runs silo --demo --a2a-addr", serve)
	}
	a2a := freePort(t)
	p := startSilo(t, t.TempDir(), "--a2a-addr", a2a, "--a2a-allow-private-networks")

	want := []string{
		`"name":"Echo:dev:e1"`,
		`Progress/think`,
		`"name":"Progress"`,
		`"name":"reply","parts":[{"text":"hi over JSON-RPC","metadata":{"agentsilo.label":"agent-message","agentsilo.outside":true}}]`,
		`"name":"reply","parts":[{"text":"hi over HTTP+JSON","metadata":{"agentsilo.label":"agent-message","agentsilo.outside":true}}]`,
	}
	lines := strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/a2a.md", "a2a:curl")), "\n")
	if len(lines) != len(want) {
		t.Fatalf("docs/a2a.md a2a:curl has %d lines, want %d", len(lines), len(want))
	}
	for i, line := range lines {
		words := shellWords(t, strings.ReplaceAll(line, "127.0.0.1:9090", a2a))
		if words[0] != "curl" {
			t.Fatalf("docs/a2a.md a2a:curl line %q: want curl", line)
		}
		out := curl(t, words[1:])
		if !strings.Contains(out, want[i]) {
			t.Errorf("%s answered\n%s\nwant %s in it", line, out, want[i])
		}
		if strings.Contains(line, "-d") && !strings.Contains(out, "TASK_STATE_COMPLETED") {
			t.Errorf("%s answered\n%s\nwant a completed task", line, out)
		}
	}

	remote := testutil.DocBlock(t, "docs/a2a.md", "a2a:remote")
	const weather = "https://weather.example.com/.well-known/agent-card.json"
	if !strings.Contains(remote, weather) {
		t.Fatalf("docs/a2a.md a2a:remote does not name %s", weather)
	}
	remote = strings.ReplaceAll(remote, weather, "http://"+a2a+"/a2a/Echo/system/weather/.well-known/agent-card.json")
	out, errOut := docShell(t, t.TempDir(), remote, "AGENTSILO_ADDR="+p.gateway, "KEY=a-key")
	if !strings.HasSuffix(out, "Rome, tomorrow\n") || !strings.Contains(errOut, "Rome, tomorrow") {
		t.Errorf("docs/a2a.md a2a:remote printed %q, stderr %q; want the remote Echo's reply, and its streamed artifact on stderr", out, errOut)
	}
}

// TestAgentGuideQuestions runs the agent guide's answers (docs/agents.md)
// against a silo with the demo agents: a subscription made from outside
// activates its agent, and a Counter whose state an operator deleted
// counts afresh.
func TestAgentGuideQuestions(t *testing.T) {
	buildBinaries(t)
	p := startSilo(t, t.TempDir())
	env := "AGENTSILO_ADDR=" + p.gateway

	docShell(t, t.TempDir(), testutil.DocBlock(t, "docs/agents.md", "agent:subscribe"), env)
	testutil.WaitFor(t, "Inbox:a to take the published order", func() bool {
		out, _, code := p.cli("ask", "Inbox:a", "count")
		return code == 0 && out == "1"
	})

	out, _ := docShell(t, t.TempDir(), testutil.DocBlock(t, "docs/agents.md", "agent:state-delete"), env)
	if got := strings.Fields(out); len(got) < 3 || got[0] != "1" || got[1] != "2" || got[len(got)-1] != "1" {
		t.Errorf("docs/agents.md agent:state-delete printed %q, want 1, 2, then 1 after the delete", out)
	}
}
