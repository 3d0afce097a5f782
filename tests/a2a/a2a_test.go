// Package a2atests runs silo processes (the program in ./silo: the demo
// agents and package a2atest's) and drives their A2A endpoints: a task
// started through one silo and read, subscribed to and failed through
// another when the first is killed -9; and the official JavaScript SDK as
// an independent client.
package a2atests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// siloBin is the test silo program, built once by TestMain.
var siloBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "a2atests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	siloBin = filepath.Join(dir, "silo")
	if out, err := exec.Command("go", "build", "-o", siloBin, "./silo").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test silo: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// silo is a silo process.
type silo struct {
	name, a2a, gossip, http, gateway string
	cmd                              *exec.Cmd
	done                             chan struct{}
}

// startSilo starts a silo process on etcd under prefix, joining join
// (gossip addresses), with more flags, and waits until it serves. It is
// killed at the test's end.
func startSilo(t *testing.T, e *etcdtest.Server, prefix, name string, join []string, flags ...string) *silo {
	t.Helper()
	s := &silo{name: name, a2a: testutil.FreeAddr(t), gossip: testutil.FreeAddr(t), http: testutil.FreeAddr(t), gateway: testutil.FreeAddr(t), done: make(chan struct{})}
	args := []string{
		"--name", name,
		"--gateway-addr", s.gateway, "--peer-addr", testutil.FreeAddr(t),
		"--gossip-addr", s.gossip, "--http-addr", s.http, "--a2a-addr", s.a2a,
		"--etcd-endpoints", e.Endpoint(), "--etcd-prefix", prefix,
		"--lease-ttl", "3s", "--log-format", "json",
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	s.cmd = exec.Command(siloBin, append(args, flags...)...)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("log of %s:\n%s", name, tail(string(b), 40))
		}
	})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	testutil.WaitFor(t, name+" to serve", func() bool {
		select {
		case <-s.done:
			t.Fatalf("%s exited", name)
		default:
		}
		resp, err := hc.Get("http://" + s.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// kill sends SIGKILL and waits for the process to end.
func (s *silo) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// client makes an SDK client of agent (Type/owner/alias) at s, over transport.
func client(t *testing.T, s *silo, agent string, transport spec.TransportProtocol) *a2aclient.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.a2a, agentcard.WithPath("/a2a/"+agent+"/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{transport}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() })
	return c
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func partsText(parts spec.ContentParts) string {
	s := ""
	for _, p := range parts {
		s += p.Text()
	}
	return s
}

// A task started through silo 0 is read and subscribed to through silo 1;
// silo 0, which runs the turn, is killed -9: the task ends failed, with
// the reason, for the subscriber and for a read, never stuck working.
// Both transports.
func TestKillMidTurn(t *testing.T) {
	e := etcdtest.Start(t)
	s0 := startSilo(t, e, "/kill/", "s0", nil)
	s1 := startSilo(t, e, "/kill/", "s1", []string{s0.gossip})

	type watched struct {
		id     spec.TaskID
		states chan []spec.TaskState
		c1     *a2aclient.Client
	}
	var tasks []watched
	for _, tr := range []spec.TransportProtocol{spec.TransportProtocolJSONRPC, spec.TransportProtocolHTTPJSON} {
		agent := "Block/dev/k-" + strings.ToLower(strings.ReplaceAll(string(tr), "+", ""))
		c0 := client(t, s0, agent, tr)
		c1 := client(t, s1, agent, tr)
		var id spec.TaskID
		for ev, err := range c0.SendStreamingMessage(t.Context(), &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("wait"))}) {
			if err != nil {
				t.Fatalf("%s: %v", tr, err)
			}
			if u, ok := ev.(*spec.TaskStatusUpdateEvent); ok && u.Status.Message != nil && partsText(u.Status.Message.Parts) == "started" {
				id = u.TaskID
				break
			}
		}
		got, err := c1.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
		if err != nil || got.Status.State != spec.TaskStateWorking {
			t.Fatalf("%s: read through s1: %v %v", tr, got, err)
		}
		w := watched{id: id, states: make(chan []spec.TaskState, 1), c1: c1}
		subscribed := make(chan struct{})
		go func() {
			var states []spec.TaskState
			for ev, err := range c1.SubscribeToTask(context.WithoutCancel(t.Context()), &spec.SubscribeToTaskRequest{ID: id}) {
				if err != nil {
					states = append(states, spec.TaskState("error: "+err.Error()))
					break
				}
				switch v := ev.(type) {
				case *spec.Task:
					states = append(states, v.Status.State)
					close(subscribed)
				case *spec.TaskStatusUpdateEvent:
					states = append(states, v.Status.State)
				}
			}
			w.states <- states
		}()
		<-subscribed
		tasks = append(tasks, w)
	}

	s0.kill()
	for _, w := range tasks {
		states := <-w.states
		if len(states) != 2 || states[0] != spec.TaskStateWorking || states[1] != spec.TaskStateFailed {
			t.Errorf("subscription through s1: %v, want working then failed", states)
		}
		got, err := w.c1.GetTask(t.Context(), &spec.GetTaskRequest{ID: w.id})
		if err != nil || got.Status.State != spec.TaskStateFailed || got.Status.Message == nil ||
			!strings.Contains(partsText(got.Status.Message.Parts), "silo s0 stopped while the task was being worked on") {
			t.Errorf("the task after the kill: %+v %v", got, err)
		}
	}
}

// The official JavaScript SDK, an independent implementation, drives a
// silo with its 1.0 JSON-RPC and HTTP+JSON transports and its legacy 0.3
// JSON-RPC transport (tests/a2ajs/client.mjs).
func TestJSClient(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "a2ajs")
	installJS(t, dir)
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`{"keys": [{"sha256": "`+sha256Hex("alice-key")+`", "principal": "alice"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t)
	s := startSilo(t, e, "/js/", "js", nil, "--auth-file", keys)
	cmd := exec.Command("node", filepath.Join(dir, "client.mjs"), "http://"+s.a2a, "alice-key")
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the JavaScript client failed: %v", err)
	}
	if !strings.Contains(string(out), "\nall ok") || strings.Count(string(out), "\nok ") < 38 {
		t.Fatalf("the JavaScript client did not run every check")
	}
}

// The A2A guide's clients (docs/a2a.md), the Go SDK's and the JavaScript SDK's, run as
// written against a silo with the demo agents (at the silo's address
// instead of the guide's 127.0.0.1:9090).
func TestReadmeClients(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "/readme/", "readme", nil)
	addr := func(src string) string { return strings.ReplaceAll(src, "127.0.0.1:9090", s.a2a) }

	// Go: a module of its own, on the a2a-go version this module pins.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(addr(testutil.DocBlock(t, "docs/a2a.md", "a2a:go"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ver, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/a2aproject/a2a-go/v2").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mod", "init", "example.com/hello"},
		{"get", "github.com/a2aproject/a2a-go/v2@" + strings.TrimSpace(string(ver))},
		{"mod", "tidy"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	want := "TASK_STATE_WORKING thinking 1/3 about \"plan a trip\"\nTASK_STATE_WORKING thinking 2/3 about \"plan a trip\"\nTASK_STATE_WORKING thinking 3/3 about \"plan a trip\"\nartifact: done: plan a trip\nTASK_STATE_COMPLETED\n"
	if err != nil || string(out) != want {
		t.Fatalf("the A2A guide's Go client: %v\n%s\nwant\n%s", err, out, want)
	}

	// JavaScript: beside tests/a2ajs's node_modules.
	_, file, _, _ := runtime.Caller(0)
	js := filepath.Join(filepath.Dir(file), "..", "a2ajs")
	installJS(t, js)
	script := filepath.Join(js, "readme-hello.mjs")
	if err := os.WriteFile(script, []byte(addr(testutil.DocBlock(t, "docs/a2a.md", "a2a:js"))), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	out, err = exec.Command("node", script).CombinedOutput()
	if err != nil || string(out) != "3 hi from JS\n" {
		t.Fatalf("the A2A guide's JavaScript client: %v\n%s", err, out)
	}
}

// installJS runs npm ci in dir if its node_modules lacks the SDK (.ci/run
// runs it; a fresh checkout gets it here).
func installJS(t *testing.T, dir string) {
	t.Helper()
	testutil.NeedCommand(t, "node", "Node.js 20 or later, Debian's nodejs package: the JavaScript SDK is the independent A2A client of these tests")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@a2a-js", "sdk")); err == nil {
		return
	}
	testutil.NeedCommand(t, "npm", "Debian's npm package, to install tests/a2ajs's pinned SDK")
	if out, err := exec.Command("npm", "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s (needs the npm registry once): %v\n%s", dir, err, out)
	}
}
