package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// compactJSON returns s, a JSON value, without insignificant spaces
// (protojson varies them on purpose).
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b.String()
}

// runStdin is runClient with stdin as the client's standard input (a pipe;
// nil: /dev/null).
func runStdin(t *testing.T, addr, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := command(t, addr, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		ee, ok := err.(interface{ ExitCode() int })
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errOut.String(), code
}

func TestVersion(t *testing.T) {
	out, errOut, code := runClient(t, "", "version")
	if code != 0 || out != "client (devel) "+runtime.Version()+"\n" {
		t.Fatalf("version: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out2, _, code := runClient(t, "", "--version"); code != 0 || out2 != out {
		t.Fatalf("--version: code %d, stdout %q; want %q", code, out2, out)
	}
	out, _, code = runClient(t, "", "-o", "json", "version")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version != "(devel)" || v.Go != runtime.Version() || v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("version -o json: code %d, stdout %q, %v", code, out, err)
	}
	if _, errOut, code := runClient(t, "", "version", "extra"); code != 2 || !strings.Contains(errOut, "unexpected argument") {
		t.Fatalf("version extra: code %d, stderr %q", code, errOut)
	}
}

// The revision, when the build recorded one (the tests build without VCS
// stamping), and agentsilo's version when the client is built from
// another module.
func TestVersionOf(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "5189f89c"}, {Key: "vcs.time", Value: "2026-11-21T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	v := versionOf(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: module, Version: "v0.2.0"}, Settings: vcs})
	if got := v.String(); got != "client v0.2.0 5189f89c go1.26.8\n" || v.Time != "2026-11-21T10:00:00Z" || !v.Modified {
		t.Fatalf("own module: %q, %+v", got, v)
	}
	v = versionOf(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/mysilo", Version: "(devel)"},
		Deps: []*debug.Module{{Path: module, Version: "v0.3.1"}}, Settings: vcs})
	if got := v.String(); got != "client v0.3.1 go1.26.8\n" {
		t.Fatalf("as a dependency: %q", got)
	}
	v = versionOf(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/mysilo"},
		Deps: []*debug.Module{{Path: module, Version: "v0.0.0", Replace: &debug.Module{Path: "../agentsilo"}}}})
	if got := v.String(); got != "client v0.0.0 (replaced by ../agentsilo) go1.26.8\n" {
		t.Fatalf("as a replaced dependency: %q", got)
	}
	if got := versionOf(nil); got.Version != "unknown" || got.Go != runtime.Version() {
		t.Fatalf("without build info: %+v", got)
	}
}

// Every command has its help, through --help, -h and help NAME alike, on
// stdout with exit 0, naming its flags.
func TestCommandHelp(t *testing.T) {
	out, _, code := runClient(t, "", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage: client ") {
		t.Fatalf("--help: code %d, stdout %q", code, out)
	}
	for _, c := range commands {
		if !strings.Contains(out, "\n  "+c.name) {
			t.Errorf("--help does not list %s", c.name)
		}
		args := append(strings.Fields(c.name), "--help")
		help, errOut, code := runClient(t, "", args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(help, "usage: client "+c.name+" ") || !strings.Contains(help, c.doc) {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, code, help, errOut)
			continue
		}
		if h, _, code := runClient(t, "", append(strings.Fields(c.name), "-h")...); code != 0 || h != help {
			t.Errorf("%s -h: code %d, stdout %q; want what --help printed", c.name, code, h)
		}
		if h, _, code := runClient(t, "", append([]string{"help"}, strings.Fields(c.name)...)...); code != 0 || h != help {
			t.Errorf("help %s: code %d, stdout %q; want what --help printed", c.name, code, h)
		}
	}
	for cmd, flags := range map[string][]string{
		"ask":        {"--type type", "--channel", "--data-file file", "--data JSON", "--data-type", "--state k=v"},
		"publish":    {"--data-file file", "--data JSON", "--data-type"},
		"memory put": {"--ttl duration", "(default 60m)"},
		"agents":     {"--type type"},
		"create":     {"--config k=v"},
		"acl add":    {"--owner pattern", "--agent pattern", "--caller", "--perm", "--at position", "(default *)"},
		"acl update": {"--owner", "--agent", "--caller", "--perm"},
		"acl check":  {"--caller principal", "--perm permission", "--group group"},
	} {
		help, _, _ := runClient(t, "", append(strings.Fields(cmd), "--help")...)
		for _, f := range flags {
			if !strings.Contains(help, f) {
				t.Errorf("%s --help does not name %q:\n%s", cmd, f, help)
			}
		}
		if strings.Contains(help, "--addr") || strings.Contains(help, "--timeout") {
			t.Errorf("%s --help lists the global flags:\n%s", cmd, help)
		}
		if strings.Contains(help, "(default 0s)") {
			t.Errorf("%s --help gives a zero duration as a default:\n%s", cmd, help)
		}
	}
	if help, _, _ := runClient(t, "", "acl", "update", "--help"); strings.Contains(help, "--at") {
		t.Errorf("acl update --help names --at:\n%s", help)
	}
	// The acl group, and what is not a command.
	for _, args := range [][]string{{"acl", "--help"}, {"acl", "-h"}, {"help", "acl"}} {
		if out, _, code := runClient(t, "", args...); code != 0 || !strings.HasPrefix(out, "usage: client acl SUBCOMMAND") || !strings.Contains(out, "  check AGENT") {
			t.Errorf("%v: code %d, stdout %q", args, code, out)
		}
	}
	if out, _, code := runClient(t, "", "help"); code != 0 || !strings.HasPrefix(out, "usage: client [global flags]") {
		t.Errorf("help: code %d, stdout %q", code, out)
	}
	for _, args := range [][]string{{"help", "nope"}, {"help", "acl", "nope"}, {"nope", "--help"}, {"acl", "nope"}, {"acl"}} {
		if out, errOut, code := runClient(t, "", args...); code != 2 || out != "" || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want a usage error", args, code, out, errOut)
		}
	}
}

// The text of ask, send and event from stdin.
func TestMessageFromStdin(t *testing.T) {
	s := startSilo(t)
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"dash", "hello from stdin\n", []string{"ask", "Echo:x", "-"}, "hello from stdin\n"},
		{"no text, piped", "piped\n", []string{"ask", "Echo:x"}, "piped\n"},
		{"lines kept, one trailing newline dropped", "a\nb\n\n", []string{"ask", "Echo:x"}, "a\nb\n\n"},
		{"CRLF", "dos\r\n", []string{"ask", "Echo:x", "-"}, "dos\n"},
		{"text wins over stdin", "ignored", []string{"ask", "Echo:x", "the", "args"}, "the args\n"},
		{"dash among words is text", "ignored", []string{"ask", "Echo:x", "a", "-", "b"}, "a - b\n"},
		{"empty text is a text", "ignored", []string{"ask", "Echo:x", ""}, "\n"},
		{"empty stdin is an empty message", "", []string{"ask", "Echo:x"}, "\n"},
		{"send", "one way\n", []string{"send", "Echo:y"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runStdin(t, s.addr, tc.stdin, tc.args...)
			if code != 0 || out != tc.want {
				t.Fatalf("code %d, stdout %q, stderr %q; want %q", code, out, errOut, tc.want)
			}
		})
	}
	// A file as stdin is piped input too.
	f := filepath.Join(t.TempDir(), "msg.txt")
	if err := os.WriteFile(f, []byte("from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := command(t, s.addr, "ask", "Echo:x")
	cmd.Stdin = in
	if out, err := cmd.Output(); err != nil || string(out) != "from a file\n" {
		t.Fatalf("stdin from a file: %q, %v", out, err)
	}
	// No text and nothing piped (stdin is /dev/null): a usage error, not an
	// empty message.
	for _, c := range []string{"ask", "send", "event"} {
		out, errOut, code := runClient(t, s.addr, c, "Echo:x")
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "error: "+c+": want AGENT TEXT") {
			t.Fatalf("%s without text: code %d, stdout %q, stderr %q", c, code, out, errOut)
		}
	}
}

// A text that is not UTF-8, as an argument or on stdin, is InvalidArgument
// (exit 2), reported at once.
func TestInvalidUTF8Text(t *testing.T) {
	s := startSilo(t)
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"ask", "Echo:x", "caf\xe9"}},
		{"caf\xe9\n", []string{"ask", "Echo:x"}},
		{"caf\xe9", []string{"send", "Echo:x", "-"}},
		{"", []string{"event", "Echo:x", "ok", "--state", "k=\xff"}},
	} {
		out, errOut, code := runStdin(t, s.addr, tc.stdin, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "error: InvalidArgument: ") || !strings.Contains(errOut, "not valid UTF-8") {
			t.Errorf("%q: code %d, stdout %q, stderr %q", tc.args, code, out, errOut)
		}
	}
	if n := s.rt.Len(); n != 0 {
		t.Fatalf("%d activations: a message that is not UTF-8 reached the silo", n)
	}
}

// An address without a port is port 7070: the test gateway listens there on
// a loopback address of its own.
func TestAddrDefaultPort(t *testing.T) {
	var lis net.Listener
	for range 50 {
		host := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
		var err error
		if lis, err = net.Listen("tcp", net.JoinHostPort(host, "7070")); err == nil {
			break
		}
	}
	if lis == nil {
		t.Fatal("no loopback address with port 7070 free")
	}
	host, _, _ := net.SplitHostPort(lis.Addr().String())
	startSiloOn(t, lis)
	if out, errOut, code := runClient(t, "127.0.0.1:1", "--addr", host, "ask", "Echo:x", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("--addr %s: code %d, stdout %q, stderr %q", host, code, out, errOut)
	}
	if out, errOut, code := runClient(t, host, "ask", "Echo:x", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("AGENTSILO_ADDR=%s: code %d, stdout %q, stderr %q", host, code, out, errOut)
	}
	if _, errOut, code := runClient(t, "a:b:c", "ask", "Echo:x", "hi"); code != 2 || !strings.Contains(errOut, "error: InvalidArgument: ") {
		t.Fatalf("--addr a:b:c: code %d, stderr %q", code, errOut)
	}
}

// Listings with nothing to list say so.
func TestEmptyTable(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out}
	if err := g.table("NAME\tSTATE", 0, nil); err != nil || out.String() != "none\n" {
		t.Fatalf("%q, %v", out.String(), err)
	}
}
