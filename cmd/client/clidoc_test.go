package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCLIDocMatchesHelp: docs/cli.md's table of commands names every
// command `client help` lists, and none that it does not.
func TestCLIDocMatchesHelp(t *testing.T) {
	out, errOut, code := runClient(t, "", "help")
	if code != 0 {
		t.Fatalf("help: code %d, stderr %q", code, errOut)
	}
	var listed []string
	in := false
	for line := range strings.Lines(out) {
		switch {
		case strings.HasPrefix(line, "commands:"):
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			// "  NAME ARGS<2+ spaces>summary": the name is the first
			// column's leading lowercase words.
			first := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), 2)[0]
			listed = append(listed, commandWords(first)...)
		}
	}
	if len(listed) < 30 {
		t.Fatalf("read %d commands from client help: the parser is wrong\n%s", len(listed), out)
	}

	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for line := range strings.Lines(string(data)) {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		for _, synopsis := range backticked(cells[1]) {
			documented = append(documented, commandWords(strings.ReplaceAll(synopsis, "\x00", "|"))...)
		}
	}
	for _, c := range listed {
		if !slices.Contains(documented, c) {
			t.Errorf("client help lists %q, which docs/cli.md does not document", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(listed, c) {
			t.Errorf("docs/cli.md documents %q, which client help does not list", c)
		}
	}
}

// commandWords returns the command names a synopsis gives: its leading
// words of lowercase letters, with alternatives (replay|drop) spelled
// out; none for a synopsis that starts otherwise (--version).
func commandWords(synopsis string) []string {
	var words []string
	for _, w := range strings.Fields(synopsis) {
		if !regexp.MustCompile(`^[a-z]+(\|[a-z]+)*$`).MatchString(w) {
			break
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return nil
	}
	names := []string{""}
	for _, w := range words {
		var next []string
		for _, n := range names {
			for _, alt := range strings.Split(w, "|") {
				next = append(next, strings.TrimSpace(n+" "+alt))
			}
		}
		names = next
	}
	return names
}

// backticked returns the `quoted` parts of s.
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
