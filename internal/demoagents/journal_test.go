package demoagents

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

func TestJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	reg := grain.NewRegistry()
	if err := RegisterJournal(reg, path); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Silo = "s1"
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rt.Ask(t.Context(), &grain.Message{From: "Session:alice:s", To: "Journal:alice:j", Message: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "s1" {
		t.Errorf("Journal replied %q, want the silo name s1", r.Message)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("journal has %d lines, want start, turn and end:\n%s", len(lines), b)
	}
	pid := strconv.Itoa(os.Getpid())
	for i, want := range []string{"start", "turn", "end"} {
		f := strings.Fields(lines[i])
		if len(f) < 5 || f[0] != want || f[1] != "Journal:alice:j" || f[2] != "s1" || f[3] != pid {
			t.Errorf("line %d = %q, want %s Journal:alice:j s1 %s <nanos>", i, lines[i], want, pid)
		}
	}
}
