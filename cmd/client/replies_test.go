package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A typed skill's reply (JSON data, no text) prints as its JSON, in text
// and in -o json alike (not as an empty line, nor as base64); its
// arguments go inline with --data, or in a file with --data-file, and
// neither needs a TEXT.
func TestAskTypedReply(t *testing.T) {
	s := startSilo(t)
	out, errOut, code := runClient(t, s.addr, "ask", "Quote:q", "--type", "quote", "--data", `{"qty": 4}`)
	if code != 0 || out != "{\"price\": 10}\n" {
		t.Fatalf("ask --data: code %d, stdout %q, stderr %q; want the reply's JSON", code, out, errOut)
	}
	out, errOut, code = runClient(t, s.addr, "-o", "json", "ask", "Quote:q", "--type", "quote", "--data", `{"qty": 2}`)
	var reply struct {
		From     string          `json:"from"`
		DataType string          `json:"dataType"`
		Data     json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &reply); code != 0 || err != nil {
		t.Fatalf("-o json ask: code %d, stdout %q, stderr %q: %v", code, out, errOut, err)
	}
	if string(reply.Data) != `{"price":5}` || reply.DataType != "application/json" || reply.From != "Quote:dev:q" {
		t.Fatalf("-o json ask: %s; want the data as a JSON object", out)
	}

	// --data-file and no TEXT (no stdin either), as docs/mcp.md calls an
	// MCP tool.
	args := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(args, []byte(`{"qty": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runClient(t, s.addr, "ask", "--type", "quote", "--data-file", args, "--data-type", "application/json", "Quote:q")
	if code != 0 || out != "{\"price\": 2.5}\n" {
		t.Fatalf("ask --data-file without TEXT: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// With data and no TEXT, a pipe on stdin is not the text: "-" says so.
	if out, errOut, code := runStdin(t, s.addr, "piped", "ask", "Echo:e", "--data", "{}"); code != 0 || out != "\n" {
		t.Fatalf("ask --data with stdin piped: code %d, stdout %q, stderr %q; want the empty text echoed", code, out, errOut)
	}
	if out, errOut, code := runStdin(t, s.addr, "piped", "ask", "Echo:e", "-", "--data", "{}"); code != 0 || out != "piped\n" {
		t.Fatalf("ask - --data: code %d, stdout %q, stderr %q; want the piped text echoed", code, out, errOut)
	}

	// Bad inline data, both data flags, a data type without data.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ask", "Quote:q", "--data", "{qty"}, `--data "{qty": not JSON`},
		{[]string{"ask", "Quote:q", "--data", "{}", "--data-file", args}, "give one of them"},
		{[]string{"ask", "Quote:q", "x", "--data-type", "text/plain"}, "--data-type needs --data-file or --data"},
	} {
		if out, errOut, code := runClient(t, s.addr, c.args...); code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want a usage error with %q", c.args, code, out, errOut, c.want)
		}
	}

	// Data of another kind: its bytes as they are when there is no text.
	bin := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(bin, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runClient(t, s.addr, "ask", "Bytes:b", "--data-file", bin, "--data-type", "application/octet-stream"); code != 0 || out != "\x00\x01\x02\xff" {
		t.Fatalf("ask Bytes: code %d, stdout %q, stderr %q; want the reply's bytes", code, out, errOut)
	}
}

// A reply with neither text nor data (a background A2A call's) prints its
// state, k=v a line in key order: the task's id and state.
func TestAskReplyWithStateOnly(t *testing.T) {
	s := startSilo(t)
	out, errOut, code := runClient(t, s.addr, "ask", "Task:builder", "build the release")
	want := "a2a.context_id=c-1\na2a.follow=background\na2a.task_id=t-1\na2a.task_state=TASK_STATE_SUBMITTED\n"
	if code != 0 || out != want {
		t.Fatalf("ask Task: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	// An empty reply is still an empty line.
	if out, _, code := runClient(t, s.addr, "ask", "Echo:e", ""); code != 0 || out != "\n" {
		t.Fatalf("ask Echo with an empty text: code %d, stdout %q", code, out)
	}
}
