package demoagents

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// TestStateProbe: set and get go through the state store; a held save
// waits for its file and then saves with the etag it loaded before waiting,
// so a write that came in between makes it a conflict; every turn is
// journalled after its load.
func TestStateProbe(t *testing.T) {
	dir := t.TempDir()
	journal := filepath.Join(dir, "journal")
	reg := grain.NewRegistry()
	if err := RegisterJournal(reg, journal); err != nil {
		t.Fatal(err)
	}
	store := grain.NewMemoryStateStore()
	cfg := grain.DefaultConfig()
	cfg.Silo = "s1"
	cfg.State = store
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const to = "StateProbe:alice:p"
	ask := func(text string) (string, error) {
		r, err := rt.Ask(t.Context(), &grain.Message{From: "Session:alice:s", To: to, Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}
	for _, step := range []struct{ ask, want string }{{"get", ""}, {"set one", "one"}, {"get", "one"}} {
		if got, err := ask(step.ask); err != nil || got != step.want {
			t.Fatalf("%q = %q, %v; want %q", step.ask, got, err, step.want)
		}
	}
	if _, err := ask("jump"); err == nil {
		t.Error("jump: no error")
	}

	turns := func() int { return strings.Count(readFile(t, journal), "turn "+to+" ") }
	release := filepath.Join(dir, "release")
	held := make(chan error, 1)
	before := turns()
	go func() {
		got, err := ask("hold two " + release)
		if err == nil && got != "two" {
			err = errors.New("hold replied " + got)
		}
		held <- err
	}()
	for turns() == before { // the held turn has loaded
		select {
		case err := <-held:
			t.Fatalf("hold returned before its file existed: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	addr, err := grain.ParseAddress(to)
	if err != nil {
		t.Fatal(err)
	}
	_, etag, err := store.Load(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(t.Context(), addr, []byte("other"), etag); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-held; !errors.Is(err, grain.ErrConflict) {
		t.Errorf("held save after another write: %v, want a conflict", err)
	}
	if got, err := ask("get"); err != nil || got != "other" {
		t.Errorf("get = %q, %v; want the other write's value", got, err)
	}
	// Released already: a second hold saves at once.
	if got, err := ask("hold three " + release); err != nil || got != "three" {
		t.Errorf("hold three = %q, %v", got, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
