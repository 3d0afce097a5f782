package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// bin is the client binary, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentsilo-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "client")
	// Without VCS stamping, the version is "(devel)" in a clean git
	// checkout as in a changed one (TestVersion).
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// silo is an in-process runtime and gateway with test agents: Echo (replies
// with the text), Progress (pushes p1 and p2 to the caller, then replies
// "done"), Slow (waits for its context to end), Quote (a typed skill's
// agent: JSON {"qty": n} in, JSON {"price": 2.5n} out, no text), Task
// (answers as a background A2A call does: no text, no data, the task's ids
// and state in its state), Bytes (replies with the bytes it was sent as
// its data, and no text).
type silo struct {
	addr string
	rt   *grain.Runtime
}

func startSilo(t *testing.T) *silo {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startSiloOn(t, lis)
}

// startSiloOn is startSilo with its gateway serving lis.
func startSiloOn(t *testing.T, lis net.Listener) *silo {
	t.Helper()
	return startSiloWith(t, lis, grain.NewRegistry())
}

// startSiloWith is startSiloOn with reg's types beside the test agents.
func startSiloWith(t *testing.T, lis net.Listener, reg *grain.Registry) *silo {
	t.Helper()
	agents := map[string]agentFunc{
		"Echo": func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.Message = m.Message
			return r, nil
		},
		"Progress": func(h grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error) {
			for i := 1; i <= 2; i++ {
				if err := h.Send(ctx, m.From, &grain.Message{MessageType: "progress", Message: fmt.Sprint("p", i)}); err != nil {
					return nil, err
				}
			}
			r := m.Response()
			r.Message = "done"
			return r, nil
		},
		"Slow": func(_ grain.Host, ctx context.Context, _ *grain.Message) (*grain.Message, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
		"Quote": func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			var in struct{ Qty int }
			if m.MessageType != "quote" || m.DataType != grain.JSONType || json.Unmarshal(m.Data, &in) != nil {
				return nil, fmt.Errorf("want a quote with JSON data, got type %q, data type %q, data %q", m.MessageType, m.DataType, m.Data)
			}
			r := m.Response()
			r.DataType, r.Data = grain.JSONType, fmt.Appendf(nil, `{"price": %g}`, 2.5*float64(in.Qty))
			return r, nil
		},
		"Task": func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.State = map[string]string{"a2a.task_id": "t-1", "a2a.context_id": "c-1", "a2a.task_state": "TASK_STATE_SUBMITTED", "a2a.follow": "background"}
			return r, nil
		},
		"Bytes": func(_ grain.Host, _ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.DataType, r.Data = m.DataType, m.Data
			return r, nil
		},
	}
	for name, f := range agents {
		if err := reg.Register(name, func(h grain.Host) (grain.Agent, error) { return agent{h, f}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	rcfg := grain.DefaultConfig()
	rcfg.Logger = logger
	gcfg := gateway.DefaultConfig()
	gcfg.Addr = "127.0.0.1:0"
	gcfg.Logger = logger
	sessions, err := gateway.NewSessions(gcfg, "")
	if err != nil {
		t.Fatal(err)
	}
	siloapi.Wire(&rcfg, siloapi.Wiring{Sessions: sessions})
	rt, err := grain.New(rcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gcfg, rt, sessions)
	if err != nil {
		lis.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(lis) }()
	t.Cleanup(func() {
		gw.Stop()
		<-served
		rt.Close(context.Background())
	})
	return &silo{addr: lis.Addr().String(), rt: rt}
}

type agentFunc func(h grain.Host, ctx context.Context, m *grain.Message) (*grain.Message, error)

type agent struct {
	h grain.Host
	f agentFunc
}

func (a agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return a.f(a.h, ctx, m)
}

// command returns the client binary run with args against addr.
func command(t *testing.T, addr string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTSILO_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AGENTSILO_ADDR="+addr)
	return cmd
}

// runClient runs the client binary and returns its output and exit code.
func runClient(t *testing.T, addr string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := command(t, addr, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestAsk(t *testing.T) {
	s := startSilo(t)
	out, errOut, code := runClient(t, s.addr, "ask", "Echo:x", "hello", "world", "--type", "greeting", "--state", "k=v")
	if code != 0 || out != "hello world\n" || errOut != "" {
		t.Fatalf("ask: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Global flags after the command, and --addr over the environment.
	out, _, code = runClient(t, "127.0.0.1:1", "ask", "--as", "alice", "Echo:x", "hi", "--addr", s.addr)
	if code != 0 || out != "hi\n" {
		t.Fatalf("ask --addr: code %d, stdout %q", code, out)
	}
}

func TestAskJSON(t *testing.T) {
	s := startSilo(t)
	data := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(data, []byte{1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runClient(t, s.addr, "-o", "json", "--as", "alice", "ask", "Echo:x", "hi", "--data-file", data, "--data-type", "application/octet-stream")
	if code != 0 {
		t.Fatalf("ask -o json: code %d, stderr %q", code, errOut)
	}
	var reply map[string]any
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if reply["message"] != "hi" || reply["from"] != "Echo:alice:x" || reply["kind"] != "KIND_RESPONSE" {
		t.Fatalf("reply %v", reply)
	}
}

func TestPushesGoToStderr(t *testing.T) {
	s := startSilo(t)
	out, errOut, code := runClient(t, s.addr, "ask", "Progress:p", "go")
	want := "Progress:dev:p [progress]: p1\nProgress:dev:p [progress]: p2\n"
	if code != 0 || out != "done\n" || errOut != want {
		t.Fatalf("ask Progress: code %d, stdout %q, stderr %q (want %q)", code, out, errOut, want)
	}
}

func TestErrorsAndExitCodes(t *testing.T) {
	s := startSilo(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name   string
		addr   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown type", s.addr, []string{"ask", "Nope:x", "hi"}, 3, "error: NotFound: "},
		{"malformed address", s.addr, []string{"ask", "nocolon", "hi"}, 2, "error: InvalidArgument: "},
		{"reserved type", s.addr, []string{"send", "Echo:x", "hi", "--type", "_silo.stop"}, 2, "error: InvalidArgument: "},
		{"deadline", s.addr, []string{"--timeout", "100ms", "ask", "Slow:x", "hi"}, 5, "error: DeadlineExceeded: "},
		{"unreachable", unreachable, []string{"ask", "Echo:x", "hi"}, 5, "error: Unavailable: "},
		{"no command", s.addr, nil, 2, "error: no command"},
		{"unknown command", s.addr, []string{"frobnicate", "Echo:x"}, 2, "error: unknown command"},
		{"reminders without a reminder service", s.addr, []string{"reminders", "Echo:x"}, 5, "error: Unavailable: reminders are not configured"},
		{"unknown flag", s.addr, []string{"ask", "Echo:x", "--nope"}, 2, "error: flag provided but not defined"},
		{"missing agent", s.addr, []string{"ask"}, 2, "error: ask: want AGENT TEXT"},
		{"bad output", s.addr, []string{"-o", "yaml", "members"}, 2, "error: -o \"yaml\""},
		{"bad state", s.addr, []string{"ask", "Echo:x", "--state", "nokey"}, 2, "want key=value"},
		{"bad principal", s.addr, []string{"--as", "no spaces", "members"}, 2, "error: InvalidArgument: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errOut, code := runClient(t, c.addr, c.args...)
			if code != c.code || !strings.Contains(errOut, c.stderr) {
				t.Fatalf("code %d, stderr %q; want %d and %q", code, errOut, c.code, c.stderr)
			}
		})
	}
	if _, _, code := runClient(t, s.addr, "-h"); code != 0 {
		t.Fatalf("-h: code %d", code)
	}
}

func TestSendEventCreateAgentsMembers(t *testing.T) {
	s := startSilo(t)
	for _, args := range [][]string{{"send", "Echo:a", "x"}, {"event", "Echo:b", "y"}} {
		if out, errOut, code := runClient(t, s.addr, args...); code != 0 || out != "" {
			t.Fatalf("%v: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	out, _, code := runClient(t, s.addr, "--as", "alice", "create", "Echo:cfg", "--config", "a=1", "--config", "b=2")
	if code != 0 || out != "Echo:alice:cfg\n" {
		t.Fatalf("create: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, s.addr, "agents", "--type", "Counter")
	if code != 0 || out != "none\n" {
		t.Fatalf("agents of a type without any: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, s.addr, "-o", "json", "agents", "--type", "Counter")
	if code != 0 || compactJSON(t, out) != `{"agents":[]}` {
		t.Fatalf("agents -o json of a type without any: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, s.addr, "agents", "--type", "Echo")
	if code != 0 || !strings.Contains(out, "Echo:dev:a") || !strings.Contains(out, "Echo:dev:b") || !strings.HasPrefix(out, "ADDRESS") {
		t.Fatalf("agents: code %d, stdout %q", code, out)
	}
	out, _, code = runClient(t, s.addr, "-o", "json", "members")
	var members struct {
		Members []struct {
			Name, State, GatewayAddr string
			Self                     bool
		}
	}
	if err := json.Unmarshal([]byte(out), &members); code != 0 || err != nil || len(members.Members) != 1 ||
		members.Members[0].GatewayAddr != s.addr || !members.Members[0].Self || members.Members[0].State != "alive" {
		t.Fatalf("members: code %d, stdout %q, %v", code, out, err)
	}
}

func TestListen(t *testing.T) {
	s := startSilo(t)
	cmd := command(t, s.addr, "listen")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	if _, err := fmt.Sscanf(line, "listening on %s", &addr); err != nil {
		t.Fatalf("stderr %q: %v", line, err)
	}
	for _, text := range []string{"one", "two"} {
		if err := s.rt.Send(t.Context(), &grain.Message{To: addr, From: "Echo:dev:e", Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(stdout)
	for _, want := range []string{"Echo:dev:e: one\n", "Echo:dev:e: two\n"} {
		if got, err := r.ReadString('\n'); err != nil || got != want {
			t.Fatalf("stdout %q, %v; want %q", got, err, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("listen after SIGINT: %v", err)
	}
}
