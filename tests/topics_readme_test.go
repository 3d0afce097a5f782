package tests

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// shellWords splits a documented command line into its words: quotes group,
// and a " #" starts a comment.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	var quote rune
	in := false
	for i, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && (i == 0 || line[i-1] == ' '):
			if in {
				words = append(words, cur.String())
			}
			return words
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestTopicsReadme runs the Topics guide's CLI commands (docs/topics.md), as written, against
// a silo with the demo agents, and checks what they print.
func TestTopicsReadme(t *testing.T) {
	buildBinaries(t)
	p := startSilo(t, t.TempDir(), "--topic-retry-min", "50ms")
	// waitFor runs a command until its output contains want.
	waitFor := func(want string, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, errOut, code := p.cli(args...)
			if code == 0 && strings.Contains(out, want) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("client %v: exit %d, %q, %s; want %q in it", args, code, out, errOut, want)
			}
			time.Sleep(100 * time.Millisecond) // a CLI poll, as a person would
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/topics.md", "topics:cli")), "\n") {
		args := shellWords(t, line)
		if len(args) < 2 || args[0] != "client" {
			t.Fatalf("docs/topics.md line %q: want a client command", line)
		}
		args = args[1:]
		cmd := strings.Join(args, " ")
		switch {
		case cmd == "deadletters orders":
			waitFor("poison: cannot parse", args...)
			continue
		case cmd == "deadletters drop orders --all":
			// The replayed message is poison again: once it is back among
			// the dead letters, drop it.
			waitFor("poison: cannot parse", "deadletters", "orders")
		}
		out, errOut, code := p.cli(args...)
		if code != 0 {
			t.Fatalf("client %s: exit %d: %s", cmd, code, errOut)
		}
		var want string
		switch {
		case args[0] == "subscribe":
			want = "subscribed Inbox:a to dev:orders (dev:orders.#, 5 attempts)"
		case args[0] == "publish":
			want = "(queued for 1 subscriptions)"
		case args[0] == "subscriptions":
			want = "Inbox:dev:a"
		case cmd == "deadletters replay orders --all":
			want = "replayed 1 dead letters of orders"
		case cmd == "deadletters drop orders --all":
			want = "dropped 1 dead letters of orders"
		case args[0] == "broadcast":
			want = "reached 1 agents"
		}
		if !strings.Contains(out, want) {
			t.Fatalf("client %s printed %q, want %q in it", cmd, out, want)
		}
		if args[0] == "publish" && strings.Contains(cmd, "--key") {
			again, _, code := p.cli(args...)
			if code != 0 || !strings.Contains(again, "published already") {
				t.Fatalf("client %s again: %q, want published already", cmd, again)
			}
		}
	}
	// Inbox acknowledged order 1, order 2 (at its third attempt) and
	// order 4.
	waitFor("3", "ask", "Inbox:a", "count")
	// The poison message died twice: at first, and after its replay.
	if n := metricValue(scrapeMetrics(t, p.http), "agentsilo_topic_dead_letters_total", nil); n != 2 {
		t.Errorf("agentsilo_topic_dead_letters_total = %v, want 2", n)
	}
}

// TestTopicsReadmeSession runs the Topics guide's session subscription as
// written: `client subscribe` in the background, a publish, the message
// printed, and the subscription gone once the subscriber is interrupted.
func TestTopicsReadmeSession(t *testing.T) {
	buildBinaries(t)
	p := startSilo(t, t.TempDir())
	lines := strings.Split(strings.TrimSpace(testutil.DocBlock(t, "docs/topics.md", "topics:session")), "\n")
	if len(lines) != 2 {
		t.Fatalf("docs/topics.md topics:session: want 2 lines, got %q", lines)
	}
	sub, pub := shellWords(t, lines[0]), shellWords(t, lines[1])
	if sub[0] != "client" || sub[1] != "subscribe" || pub[0] != "client" || pub[1] != "publish" {
		t.Fatalf("docs/topics.md topics:session: %q", lines)
	}
	cmd := exec.CommandContext(t.Context(), bins.client, append([]string{"--addr", p.gateway}, sub[1:]...)...)
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
	defer cmd.Process.Kill()
	said := bufio.NewScanner(stderr)
	if !said.Scan() || !strings.HasPrefix(said.Text(), "subscribed Session:dev:") || !strings.Contains(said.Text(), "to dev:orders.# as dev:session-") {
		t.Fatalf("client subscribe said %q", said.Text())
	}
	go io.Copy(io.Discard, stderr)
	if out, errOut, code := p.cli(pub[1:]...); code != 0 || !strings.Contains(out, "(queued for 1 subscriptions)") {
		t.Fatalf("client publish: %d %q %s", code, out, errOut)
	}
	printed := bufio.NewScanner(stdout)
	if !printed.Scan() || !strings.HasPrefix(printed.Text(), "dev:orders.created Session:dev:pub-") || !strings.HasSuffix(printed.Text(), ": order 5") {
		t.Fatalf("client subscribe printed %q", printed.Text())
	}
	if out, _, _ := p.cli("subscriptions"); !strings.Contains(out, "dev:session-") {
		t.Fatalf("subscriptions while subscribed: %q", out)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client subscribe after an interrupt: %v", err)
	}
	if out, _, _ := p.cli("subscriptions"); strings.Contains(out, "dev:session-") {
		t.Fatalf("subscriptions after the subscriber ended: %q", out)
	}
}
