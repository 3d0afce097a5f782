package grain

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
)

// hosts activates agents of type "S" and hands out their Hosts.
type hosts struct {
	mu sync.Mutex
	m  map[string]Host
}

func (h *hosts) factory(host Host) (Agent, error) {
	h.mu.Lock()
	h.m[host.Address().String()] = host
	h.mu.Unlock()
	return echoFactory(host)
}

// stateRuntime starts a runtime with store as its state store (nil: none)
// and returns a function that activates S:t:<alias> and returns its Host.
func stateRuntime(t *testing.T, store StateStore) func(alias string) Host {
	t.Helper()
	hs := &hosts{m: map[string]Host{}}
	cfg := DefaultConfig()
	cfg.State = store
	rt := newRuntime(t, cfg, map[string]Factory{"S": hs.factory})
	return func(alias string) Host {
		t.Helper()
		if _, err := ask(t, rt, "S:t:"+alias, "hi"); err != nil {
			t.Fatal(err)
		}
		hs.mu.Lock()
		defer hs.mu.Unlock()
		return hs.m["S:t:"+alias]
	}
}

func wantConflict(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrConflict) || !errors.Is(err, errs.ErrAborted) || status.Code(err) != codes.Aborted {
		t.Fatalf("error %v (code %v), want a conflict (Aborted)", err, status.Code(err))
	}
}

func TestStateNotConfigured(t *testing.T) {
	h := stateRuntime(t, nil)("a")
	_, _, err := h.LoadState(t.Context())
	wantCode(t, err, codes.FailedPrecondition, "no state store configured")
	if !errors.Is(err, errs.ErrFailedPrecondition) {
		t.Fatalf("errors.Is(%v, ErrFailedPrecondition) = false", err)
	}
	_, err = h.SaveState(t.Context(), []byte("x"), "")
	wantCode(t, err, codes.FailedPrecondition, "S:t:a")
	wantCode(t, h.DeleteState(t.Context(), ""), codes.FailedPrecondition, "grain.Config.State")
}

func TestStateHost(t *testing.T) {
	store := NewMemoryStateStore()
	h := stateRuntime(t, store)("a")
	ctx := t.Context()

	data, etag, err := h.LoadState(ctx)
	if err != nil || data != nil || etag != "" {
		t.Fatalf("LoadState of absent = %q, %q, %v", data, etag, err)
	}
	e1, err := h.SaveState(ctx, []byte("one"), "")
	if err != nil || e1 == "" {
		t.Fatalf("SaveState new = %q, %v", e1, err)
	}
	_, err = h.SaveState(ctx, []byte("again"), "")
	wantConflict(t, err)
	e2, err := h.SaveState(ctx, []byte("two"), e1)
	if err != nil || e2 == e1 {
		t.Fatalf("SaveState = %q, %v", e2, err)
	}
	_, err = h.SaveState(ctx, []byte("stale"), e1)
	wantConflict(t, err)
	wantConflict(t, h.DeleteState(ctx, e1))
	_, err = h.SaveState(ctx, []byte("x"), "nonsense")
	wantCode(t, err, codes.InvalidArgument, "nonsense")
	if data, etag, err := h.LoadState(ctx); err != nil || string(data) != "two" || etag != e2 {
		t.Fatalf("LoadState = %q, %q, %v", data, etag, err)
	}
	if err := h.DeleteState(ctx, e2); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteState(ctx, ""); err != nil {
		t.Fatalf("DeleteState of absent with etag \"\" = %v", err)
	}
	_, err = h.SaveState(ctx, []byte("x"), e2)
	wantConflict(t, err)
	e3, err := h.SaveState(ctx, []byte("three"), "")
	if err != nil || e3 == e1 || e3 == e2 {
		t.Fatalf("SaveState after delete = %q, %v (etags before: %q, %q)", e3, err, e1, e2)
	}

	// Another agent's state is its own.
	if data, etag, err := store.Load(ctx, Address{Type: "S", Owner: "t", Alias: "b"}); err != nil || data != nil || etag != "" {
		t.Fatalf("other agent's state = %q, %q, %v", data, etag, err)
	}
}

// flakyStore wraps a StateStore. While ackLost is set, writes are applied and
// then fail with Unavailable, as if the answer was lost; while down is set,
// every call fails with Unavailable before doing anything.
//
// With goDown set, a lost answer takes the store down (as a leader that
// dies after applying a write), and a call that finds it down calls
// onDown: a test cancels the caller's context there, so that the
// runtime's retries of the write give up and leave it in doubt.
type flakyStore struct {
	StateStore
	ackLost, down, goDown atomic.Bool
	onDown                atomic.Pointer[func()]
	saves                 atomic.Int32 // Save calls that reached the inner store
}

func (s *flakyStore) isDown() bool {
	if !s.down.Load() {
		return false
	}
	if f := s.onDown.Load(); f != nil {
		(*f)()
	}
	return true
}

func (s *flakyStore) lost() {
	if s.goDown.Load() {
		s.down.Store(true)
	}
}

func (s *flakyStore) Load(ctx context.Context, addr Address) ([]byte, string, error) {
	if s.isDown() {
		return nil, "", errs.New(codes.Unavailable, "store down")
	}
	return s.StateStore.Load(ctx, addr)
}

func (s *flakyStore) Save(ctx context.Context, addr Address, data []byte, etag string) (string, error) {
	if s.isDown() {
		return "", errs.New(codes.Unavailable, "store down")
	}
	s.saves.Add(1)
	e, err := s.StateStore.Save(ctx, addr, data, etag)
	if err == nil && s.ackLost.Load() {
		s.lost()
		return "", errs.New(codes.Unavailable, "answer lost")
	}
	return e, err
}

func (s *flakyStore) Delete(ctx context.Context, addr Address, etag string) error {
	if s.isDown() {
		return errs.New(codes.Unavailable, "store down")
	}
	err := s.StateStore.Delete(ctx, addr, etag)
	if err == nil && s.ackLost.Load() {
		s.lost()
		return errs.New(codes.Unavailable, "answer lost")
	}
	return err
}

// inDoubt runs write with the store losing its answer and then staying
// down for the runtime's retries, which end when they find it down: the
// write is left in doubt. It returns write's error.
func (s *flakyStore) inDoubt(ctx context.Context, write func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() { cancel() }
	s.onDown.Store(&f)
	s.ackLost.Store(true)
	s.goDown.Store(true)
	defer func() {
		s.ackLost.Store(false)
		s.goDown.Store(false)
		s.down.Store(false)
		s.onDown.Store(nil)
	}()
	return write(ctx)
}

// A write whose answer is lost leaves the host in doubt; the next write
// first finds out what became of it.
func TestStateLostWrite(t *testing.T) {
	mem := NewMemoryStateStore()
	store := &flakyStore{StateStore: mem}
	host := stateRuntime(t, store)
	ctx := t.Context()
	load := func(h Host) (string, string) {
		t.Helper()
		data, etag, err := h.LoadState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(data), etag
	}
	save := func(h Host, data, etag string) string {
		t.Helper()
		e, err := h.SaveState(ctx, []byte(data), etag)
		if err != nil {
			t.Fatalf("SaveState(%q, %q) = %v", data, etag, err)
		}
		return e
	}

	saveInDoubt := func(h Host, data, etag string) error {
		return store.inDoubt(ctx, func(ctx context.Context) error {
			_, err := h.SaveState(ctx, []byte(data), etag)
			return err
		})
	}
	deleteInDoubt := func(h Host, etag string) error {
		return store.inDoubt(ctx, func(ctx context.Context) error { return h.DeleteState(ctx, etag) })
	}

	t.Run("settled by the retry: landed", func(t *testing.T) {
		h := host("settled")
		e1 := save(h, "one", "")
		store.ackLost.Store(true)
		e2, err := h.SaveState(ctx, []byte("two"), e1)
		store.ackLost.Store(false)
		if err != nil {
			t.Fatalf("a save whose answer was lost = %v, want its landing learnt by the retry", err)
		}
		if data, etag := load(h); data != "two" || etag != e2 {
			t.Fatalf("stored %q at %q, want two at %q", data, etag, e2)
		}
		save(h, "three", e2)
	})

	t.Run("settled by the retry: not landed", func(t *testing.T) {
		h := host("settled-not")
		e1 := save(h, "one", "")
		calls := 0
		f := func() {
			if calls++; calls == 1 {
				store.down.Store(false) // up again for the retry
			}
		}
		store.onDown.Store(&f)
		store.down.Store(true)
		e2, err := h.SaveState(ctx, []byte("two"), e1)
		store.onDown.Store(nil)
		if err != nil {
			t.Fatalf("a save that met the store down once = %v, want it made by the retry", err)
		}
		if data, etag := load(h); data != "two" || etag != e2 {
			t.Fatalf("stored %q at %q, want two at %q", data, etag, e2)
		}
	})

	t.Run("did not land, then another write", func(t *testing.T) {
		h := host("lost-other")
		e1 := save(h, "one", "")
		expired, cancel := context.WithCancel(ctx)
		cancel()
		_, err := h.SaveState(expired, []byte("two"), e1)
		wantCode(t, err, codes.Canceled, "cancelled")
		// The agent's value may hold the change of "two", which was not
		// stored: writing "three" on e1 could apply it with its own.
		_, err = h.SaveState(ctx, []byte("three"), e1)
		wantConflict(t, err)
		data, etag := load(h)
		if data != "one" || etag != e1 {
			t.Fatalf("stored %q at %q, want one at %q", data, etag, e1)
		}
		save(h, "three", etag)
	})

	t.Run("landed, then another write with the old etag", func(t *testing.T) {
		h := host("landed")
		e1 := save(h, "one", "")
		err := saveInDoubt(h, "two", e1)
		wantCode(t, err, codes.Unavailable, "answer lost")
		e3 := save(h, "three", e1) // e1 is taken as the etag "two" made
		if data, etag := load(h); data != "three" || etag != e3 {
			t.Fatalf("stored %q at %q, want three at %q", data, etag, e3)
		}
	})

	t.Run("landed, then the same write again", func(t *testing.T) {
		h := host("repeat")
		err := saveInDoubt(h, "one", "")
		wantCode(t, err, codes.Unavailable, "answer lost")
		before := store.saves.Load()
		e := save(h, "one", "")
		if n := store.saves.Load() - before; n != 0 {
			t.Fatalf("the repeated write reached the store %d times; it had landed already", n)
		}
		if data, etag := load(h); data != "one" || etag != e {
			t.Fatalf("stored %q at %q, want one at %q", data, etag, e)
		}
	})

	t.Run("did not land", func(t *testing.T) {
		h := host("lost")
		e1 := save(h, "one", "")
		expired, cancel := context.WithCancel(ctx)
		cancel()
		_, err := h.SaveState(expired, []byte("two"), e1)
		wantCode(t, err, codes.Canceled, "cancelled")
		store.down.Store(true)
		_, err = h.SaveState(ctx, []byte("two"), e1)
		store.down.Store(false)
		wantCode(t, err, codes.Unavailable, "store down") // the read back failed: still in doubt
		e2 := save(h, "two", e1)
		if data, etag := load(h); data != "two" || etag != e2 {
			t.Fatalf("stored %q at %q, want two at %q", data, etag, e2)
		}
	})

	t.Run("another writer came in", func(t *testing.T) {
		h := host("raced")
		addr := h.Address()
		e1 := save(h, "one", "")
		err := saveInDoubt(h, "two", e1)
		wantCode(t, err, codes.Unavailable, "answer lost")
		_, cur, _ := mem.Load(ctx, addr)
		if _, err := mem.Save(ctx, addr, []byte("theirs"), cur); err != nil {
			t.Fatal(err)
		}
		_, err = h.SaveState(ctx, []byte("three"), e1)
		wantConflict(t, err)
		data, etag := load(h)
		if data != "theirs" {
			t.Fatalf("stored %q, want theirs", data)
		}
		save(h, "three", etag)
	})

	t.Run("lost delete", func(t *testing.T) {
		h := host("delete")
		e1 := save(h, "one", "")
		err := deleteInDoubt(h, e1)
		wantCode(t, err, codes.Unavailable, "answer lost")
		if err := h.DeleteState(ctx, e1); err != nil {
			t.Fatalf("repeated delete = %v", err)
		}
		err = deleteInDoubt(h, "")
		wantCode(t, err, codes.Unavailable, "answer lost")
		e2 := save(h, "two", "")
		err = deleteInDoubt(h, e2)
		wantCode(t, err, codes.Unavailable, "answer lost")
		e3 := save(h, "three", e2) // the delete landed: e2 is taken as ""
		if data, etag := load(h); data != "three" || etag != e3 {
			t.Fatalf("stored %q at %q, want three at %q", data, etag, e3)
		}
	})

	t.Run("a load ends the doubt", func(t *testing.T) {
		h := host("load")
		e1 := save(h, "one", "")
		err := saveInDoubt(h, "two", e1)
		wantCode(t, err, codes.Unavailable, "answer lost")
		data, etag := load(h)
		if data != "two" {
			t.Fatalf("stored %q, want two", data)
		}
		_, err = h.SaveState(ctx, []byte("three"), e1) // e1 is stale now, and the agent knows it
		wantConflict(t, err)
		save(h, "three", etag)
	})
}

type notes struct {
	Lines []string `json:"lines"`
}

func TestStateJSON(t *testing.T) {
	mem := NewMemoryStateStore()
	h := stateRuntime(t, mem)("json")
	ctx := t.Context()

	v, etag, err := LoadJSON[notes](ctx, h)
	if err != nil || etag != "" || v.Lines != nil {
		t.Fatalf("LoadJSON of absent = %v, %q, %v", v, etag, err)
	}
	etag, err = SaveJSON(ctx, h, notes{Lines: []string{"a"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if data, _, _ := mem.Load(ctx, h.Address()); string(data) != `{"lines":["a"]}` {
		t.Fatalf("stored %s", data)
	}
	if _, err := SaveJSON(ctx, h, func() {}, etag); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("SaveJSON of a func = %v, want InvalidArgument", err)
	}

	s := NewState[notes](h)
	if s.Exists() {
		t.Fatal("Exists before Load")
	}
	if err := s.Load(ctx); err != nil || !s.Exists() || s.ETag() != etag || len(s.Value.Lines) != 1 {
		t.Fatalf("Load = %v: %+v at %q", err, s.Value, s.ETag())
	}
	s.Value.Lines = append(s.Value.Lines, "b")
	if err := s.Save(ctx); err != nil {
		t.Fatal(err)
	}

	// Another writer: Save conflicts, Update loads and applies again.
	if _, err := mem.Save(ctx, h.Address(), []byte(`{"lines":["theirs"]}`), s.ETag()); err != nil {
		t.Fatal(err)
	}
	s.Value.Lines = append(s.Value.Lines, "c")
	wantConflict(t, s.Save(ctx))
	calls := 0
	err = s.Update(ctx, func(v *notes) error {
		calls++
		v.Lines = append(v.Lines, "mine")
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Update = %v after %d calls, want 2", err, calls)
	}
	got, _, err := LoadJSON[notes](ctx, h)
	if err != nil || len(got.Lines) != 2 || got.Lines[0] != "theirs" || got.Lines[1] != "mine" {
		t.Fatalf("stored %+v, %v", got, err)
	}
	stop := errors.New("no change")
	if err := s.Update(ctx, func(*notes) error { return stop }); err != stop {
		t.Fatalf("Update = %v, want the change's error", err)
	}

	if err := s.Delete(ctx); err != nil || s.Exists() || s.Value.Lines != nil {
		t.Fatalf("Delete = %v: %+v, exists %v", err, s.Value, s.Exists())
	}

	// State that does not decode: Internal, with the etag to overwrite it.
	bad, err := mem.Save(ctx, h.Address(), []byte("not json"), "")
	if err != nil {
		t.Fatal(err)
	}
	_, etag, err = LoadJSON[notes](ctx, h)
	wantCode(t, err, codes.Internal, "does not decode")
	if etag != bad {
		t.Fatalf("LoadJSON of bad state gave etag %q, want %q", etag, bad)
	}
}

// counter is an agent whose count survives its activations.
type counter struct{ n *State[int] }

func (c *counter) OnActivate(ctx context.Context) error { return c.n.Load(ctx) }

func (c *counter) OnMessage(ctx context.Context, m *Message) (*Message, error) {
	c.n.Value++
	if err := c.n.Save(ctx); err != nil {
		return nil, err
	}
	return reply(m, strconv.Itoa(c.n.Value))
}

// An agent keeps its state in its turns, and a new activation finds it.
func TestStateAcrossActivations(t *testing.T) {
	cfg := DefaultConfig()
	cfg.State = NewMemoryStateStore()
	rt := newRuntime(t, cfg, map[string]Factory{
		"Counter": func(h Host) (Agent, error) { return &counter{n: NewState[int](h)}, nil },
	})
	for i := 1; i <= 3; i++ {
		r, err := ask(t, rt, "Counter:c", "")
		if err != nil || r.Message != strconv.Itoa(i) {
			t.Fatalf("ask %d = %v, %v", i, r, err)
		}
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	rt2 := newRuntime(t, cfg, map[string]Factory{
		"Counter": func(h Host) (Agent, error) { return &counter{n: NewState[int](h)}, nil },
	})
	r, err := ask(t, rt2, "Counter:c", "")
	if err != nil || r.Message != "4" {
		t.Fatalf("ask after a new activation = %v, %v", r, err)
	}
}
