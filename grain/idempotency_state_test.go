package grain_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// saver saves its state, then fails as its message says: "unavailable"
// with Unavailable (as a turn whose reply is lost after its save), "bad"
// with InvalidArgument.
type saver struct {
	h    grain.Host
	runs *atomic.Int32
}

func (s *saver) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	s.runs.Add(1)
	_, etag, err := s.h.LoadState(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.h.SaveState(ctx, []byte(m.Message), etag); err != nil {
		return nil, err
	}
	switch m.Message {
	case "unavailable":
		return nil, errs.New(codes.Unavailable, "lost after the save")
	case "bad":
		return nil, errs.New(codes.InvalidArgument, "refused after the save")
	}
	return m.Response(), nil
}

// A keyed Ask that fails after its state save landed says that the change
// landed; a retry under the key does not run again and gets ErrApplied
// (a transient failure) or the same error (a definite one). Without a key,
// or without a save, a transient failure is retried as before.
func TestIdempotencyAfterSave(t *testing.T) {
	var runs atomic.Int32
	reg := grain.NewRegistry()
	if err := reg.Register("Saver", func(h grain.Host) (grain.Agent, error) { return &saver{h: h, runs: &runs}, nil }); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = grain.NewMemoryStateStore()
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ask := func(text, key string) error {
		_, err := rt.Ask(t.Context(), &grain.Message{From: "Session:alice:s", To: "Saver:a", Message: text, IdempotencyKey: key})
		return err
	}

	err = ask("unavailable", "k1")
	if errs.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "state change landed") || !strings.Contains(err.Error(), "lost after the save") {
		t.Fatalf("first: %v, want Unavailable saying the change landed", err)
	}
	for range 2 {
		err = ask("unavailable", "k1")
		if !errors.Is(err, grain.ErrApplied) || errs.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), `"k1"`) {
			t.Fatalf("retry: %v, want ErrApplied naming the key", err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d times, want 1", n)
	}

	err = ask("bad", "k2")
	if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "state change landed") {
		t.Fatalf("definite failure: %v", err)
	}
	if err2 := ask("bad", "k2"); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("its retry: %v, want %v", err2, err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}

	// No key: each call runs, and no error claims to know more.
	for range 2 {
		if err := ask("unavailable", ""); errs.Code(err) != codes.Unavailable || strings.Contains(err.Error(), "landed") {
			t.Fatalf("unkeyed: %v", err)
		}
	}
	if n := runs.Load(); n != 4 {
		t.Fatalf("ran %d times, want 4", n)
	}
}
