package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The in-memory twin passes the same conformance test as the real stores.
func TestMemoryConformance(t *testing.T) {
	conformance(t, grain.NewMemoryStateStore())
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := errs.Code(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
}

func wantConflict(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, grain.ErrConflict) || status.Code(err) != codes.Aborted {
		t.Fatalf("error %v (code %v), want a conflict (Aborted)", err, status.Code(err))
	}
}

// conformance checks what every grain.StateStore promises, on store, and
// the host's handling of writes whose outcome is unknown on top of it.
func conformance(t *testing.T, store grain.StateStore) {
	var n atomic.Int32
	fresh := func() grain.Address {
		return grain.Address{Type: "State", Owner: "conf", Alias: fmt.Sprintf("a-%d.x@y", n.Add(1))}
	}
	load := func(t *testing.T, addr grain.Address) ([]byte, string) {
		t.Helper()
		data, etag, err := store.Load(t.Context(), addr)
		if err != nil {
			t.Fatalf("Load(%s) = %v", addr, err)
		}
		return data, etag
	}
	save := func(t *testing.T, addr grain.Address, data, etag string) string {
		t.Helper()
		next, err := store.Save(t.Context(), addr, []byte(data), etag)
		if err != nil {
			t.Fatalf("Save(%s, %q) = %v", addr, etag, err)
		}
		if next == "" || next == etag {
			t.Fatalf("Save(%s, %q) gave etag %q", addr, etag, next)
		}
		return next
	}
	wantStored := func(t *testing.T, addr grain.Address, data, etag string) {
		t.Helper()
		got, e := load(t, addr)
		if string(got) != data || e != etag {
			t.Fatalf("stored %q at %q, want %q at %q", got, e, data, etag)
		}
	}

	t.Run("load absent", func(t *testing.T) {
		data, etag := load(t, fresh())
		if data != nil || etag != "" {
			t.Fatalf("Load of absent = %q, %q", data, etag)
		}
	})

	t.Run("save new", func(t *testing.T) {
		addr := fresh()
		e := save(t, addr, "one", "")
		wantStored(t, addr, "one", e)
		other := fresh() // an agent's state is its own
		if data, etag := load(t, other); data != nil || etag != "" {
			t.Fatalf("another agent's state = %q, %q", data, etag)
		}
		empty := fresh()
		e = save(t, empty, "", "")
		if data, etag := load(t, empty); data == nil || len(data) != 0 || etag != e {
			t.Fatalf("empty state loads as %v at %q, want empty at %q", data, etag, e)
		}
	})

	t.Run("list", func(t *testing.T) {
		l, ok := store.(grain.StateLister)
		if !ok {
			t.Fatalf("%T lists no agents (grain.StateLister)", store)
		}
		// Owners and types that share a prefix stay apart; aliases come
		// in byte order, paged by after and limit; a deleted state goes.
		var want []string
		for _, alias := range []string{"b", "A", "a.b", "a_b", "a", "a@c", "Z-1"} {
			save(t, grain.Address{Type: "Listed", Owner: "own", Alias: alias}, "x", "")
			want = append(want, alias)
		}
		save(t, grain.Address{Type: "Listed", Owner: "own2", Alias: "other"}, "x", "")
		save(t, grain.Address{Type: "Listed2", Owner: "own", Alias: "other"}, "x", "")
		save(t, grain.Address{Type: "Listed", Owner: "ow", Alias: "n:other"}, "x", "")
		gone := grain.Address{Type: "Listed", Owner: "own", Alias: "gone"}
		if err := store.Delete(t.Context(), gone, save(t, gone, "x", "")); err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		var got []string
		after := ""
		for {
			page, err := l.List(t.Context(), "Listed", "own", after, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range page {
				if a.Type != "Listed" || a.Owner != "own" {
					t.Fatalf("listed %s", a)
				}
				got = append(got, a.Alias)
			}
			if len(page) < 3 {
				break
			}
			after = page[len(page)-1].Alias
		}
		if !slices.Equal(got, want) {
			t.Fatalf("listed %q, want %q", got, want)
		}
		if page, err := l.List(t.Context(), "Listed", "nobody", "", 10); err != nil || len(page) != 0 {
			t.Fatalf("an owner without state: %v %v", page, err)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		addr := fresh()
		e1 := save(t, addr, "one", "")
		_, err := store.Save(t.Context(), addr, []byte("again"), "")
		wantConflict(t, err)
		e2 := save(t, addr, "two", e1)
		_, err = store.Save(t.Context(), addr, []byte("stale"), e1)
		wantConflict(t, err)
		wantStored(t, addr, "two", e2)
		_, err = store.Save(t.Context(), addr, []byte("x"), "not-an-etag")
		wantCode(t, err, codes.InvalidArgument)
		wantCode(t, store.Delete(t.Context(), addr, "-1"), codes.InvalidArgument)
	})

	t.Run("delete then save", func(t *testing.T) {
		addr := fresh()
		e1 := save(t, addr, "one", "")
		e2 := save(t, addr, "two", e1)
		if err := store.Delete(t.Context(), addr, e2); err != nil {
			t.Fatal(err)
		}
		wantStored(t, addr, "", "")
		_, err := store.Save(t.Context(), addr, []byte("x"), e2)
		wantConflict(t, err)
		e3 := save(t, addr, "three", "")
		if e3 == e1 || e3 == e2 {
			t.Fatalf("etag %q reused after a delete (before: %q, %q)", e3, e1, e2)
		}
		wantStored(t, addr, "three", e3)
	})

	t.Run("delete with stale etag", func(t *testing.T) {
		addr := fresh()
		e1 := save(t, addr, "one", "")
		e2 := save(t, addr, "two", e1)
		wantConflict(t, store.Delete(t.Context(), addr, e1))
		wantConflict(t, store.Delete(t.Context(), addr, ""))
		wantStored(t, addr, "two", e2)
		if err := store.Delete(t.Context(), addr, e2); err != nil {
			t.Fatal(err)
		}
		wantConflict(t, store.Delete(t.Context(), addr, e2)) // gone already
		if err := store.Delete(t.Context(), addr, ""); err != nil {
			t.Fatalf("Delete of absent with etag \"\" = %v", err)
		}
	})

	t.Run("ended context", func(t *testing.T) {
		addr := fresh()
		e1 := save(t, addr, "one", "")
		cancelled, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := store.Save(cancelled, addr, []byte("two"), e1)
		wantCode(t, err, codes.Canceled)
		expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()
		_, err = store.Save(expired, addr, []byte("two"), e1)
		wantCode(t, err, codes.DeadlineExceeded)
		_, _, err = store.Load(expired, addr)
		wantCode(t, err, codes.DeadlineExceeded)
		wantCode(t, store.Delete(expired, addr, e1), codes.DeadlineExceeded)
		wantStored(t, addr, "one", e1)
	})

	t.Run("racing writers", func(t *testing.T) {
		const writers, rounds = 8, 5
		addr := fresh()
		etag := ""
		for round := range rounds {
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []string
				next    string
			)
			for w := range writers {
				wg.Go(func() {
					data := fmt.Sprintf("round %d writer %d", round, w)
					e, err := store.Save(t.Context(), addr, []byte(data), etag)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						winners, next = append(winners, data), e
					case errs.Code(err) != codes.Aborted:
						t.Errorf("writer %d: %v, want a conflict", w, err)
					}
				})
			}
			wg.Wait()
			if len(winners) != 1 {
				t.Fatalf("round %d (etag %q): %d writers won (%q), want exactly 1", round, etag, len(winners), winners)
			}
			wantStored(t, addr, winners[0], next)
			etag = next
		}
	})

	t.Run("host resolves a write of unknown outcome", func(t *testing.T) {
		lossy := &ackLoser{StateStore: store}
		host := hostsOn(t, lossy)
		ctx := t.Context()

		// A save with an expired context: it never reached the store.
		h := host()
		e1, err := h.SaveState(ctx, []byte("one"), "")
		if err != nil {
			t.Fatal(err)
		}
		expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_, err = h.SaveState(expired, []byte("two"), e1)
		wantCode(t, err, codes.DeadlineExceeded)
		e2, err := h.SaveState(ctx, []byte("two"), e1)
		if err != nil {
			t.Fatalf("save after a timed-out one = %v", err)
		}
		wantStored(t, h.Address(), "two", e2)

		// A save that landed but whose answer was lost, the store there
		// at once: the host's retry learns that it landed.
		lossy.lose.Store(true)
		e3, err := h.SaveState(ctx, []byte("three"), e2)
		lossy.lose.Store(false)
		if err != nil {
			t.Fatalf("save whose answer was lost = %v, want its landing learnt", err)
		}
		wantStored(t, h.Address(), "three", e3)
		e2 = e3

		// inDoubt saves with the answer lost and the store away until
		// the deadline ends the host's retries.
		inDoubt := func(data, etag string) error {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			lossy.lose.Store(true)
			lossy.stay.Store(true)
			defer func() {
				lossy.lose.Store(false)
				lossy.stay.Store(false)
				lossy.away.Store(false)
			}()
			_, err := h.SaveState(dctx, []byte(data), etag)
			return err
		}

		// Left in doubt: the old etag is taken as the one it made.
		err = inDoubt("three and a half", e2)
		wantCode(t, err, codes.Unavailable)
		e4, err := h.SaveState(ctx, []byte("four"), e2)
		if err != nil {
			t.Fatalf("save after a lost answer = %v", err)
		}
		wantStored(t, h.Address(), "four", e4)

		// The same, but another writer came in meanwhile: a conflict.
		err = inDoubt("five", e4)
		wantCode(t, err, codes.Unavailable)
		_, cur := load(t, h.Address())
		theirs := save(t, h.Address(), "theirs", cur)
		_, err = h.SaveState(ctx, []byte("six"), e4)
		wantConflict(t, err)
		data, etag, err := h.LoadState(ctx)
		if err != nil || string(data) != "theirs" || etag != theirs {
			t.Fatalf("LoadState = %q, %q, %v; want theirs at %q", data, etag, err, theirs)
		}
		if _, err := h.SaveState(ctx, []byte("six"), etag); err != nil {
			t.Fatal(err)
		}
	})
}

// ackLoser wraps a store: while lose is set, writes are applied and then
// reported as Unavailable, as when the answer is lost on the way back.
// With stay set, a lost answer takes the store away: every call fails
// with Unavailable until away is cleared.
type ackLoser struct {
	grain.StateStore
	lose, stay, away atomic.Bool
}

func (s *ackLoser) Load(ctx context.Context, addr grain.Address) ([]byte, string, error) {
	if s.away.Load() {
		return nil, "", errs.New(codes.Unavailable, "store away")
	}
	return s.StateStore.Load(ctx, addr)
}

func (s *ackLoser) Save(ctx context.Context, addr grain.Address, data []byte, etag string) (string, error) {
	if s.away.Load() {
		return "", errs.New(codes.Unavailable, "store away")
	}
	e, err := s.StateStore.Save(ctx, addr, data, etag)
	if err == nil && s.lose.Load() {
		if s.stay.Load() {
			s.away.Store(true)
		}
		return "", errs.New(codes.Unavailable, "answer lost")
	}
	return e, err
}

// hostsOn starts a grain runtime on store and returns a function that
// activates a new agent and returns its Host.
func hostsOn(t *testing.T, store grain.StateStore) func() grain.Host {
	t.Helper()
	var (
		mu    sync.Mutex
		hosts = map[string]grain.Host{}
		n     int
	)
	reg := grain.NewRegistry()
	err := reg.Register("State", func(h grain.Host) (grain.Agent, error) {
		mu.Lock()
		hosts[h.Address().String()] = h
		mu.Unlock()
		return nopAgent{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = store
	cfg.Logger = slog.New(slog.DiscardHandler)
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	return func() grain.Host {
		t.Helper()
		n++
		to := fmt.Sprintf("State:host:h%d", n)
		if _, err := rt.Ask(t.Context(), &grain.Message{From: "Session:host:s", To: to}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return hosts[to]
	}
}

type nopAgent struct{}

func (nopAgent) OnMessage(context.Context, *grain.Message) (*grain.Message, error) { return nil, nil }

// large returns n bytes of a pattern.
func large(n int) []byte { return bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n] }

// etagErrors checks that a write whose etag is not the state's says why:
// stale (another write came first), never issued (above the state's), or
// naming no state.
func etagErrors(t *testing.T, store Store) {
	addr := grain.Address{Type: "Conf", Owner: "test", Alias: "etag-errors"}
	e1, err := store.Save(t.Context(), addr, []byte("one"), "")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := store.Save(t.Context(), addr, []byte("two"), e1)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(e2, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	never := strconv.FormatInt(n+1000, 10)
	want := func(err error, says string) {
		t.Helper()
		wantConflict(t, err)
		if !strings.Contains(err.Error(), says) {
			t.Fatalf("error %q does not say %q", err, says)
		}
	}
	want(store.Delete(t.Context(), addr, e1), "etag "+e1+" is stale")
	_, err = store.Save(t.Context(), addr, []byte("x"), e1)
	want(err, "etag "+e1+" is stale")
	want(store.Delete(t.Context(), addr, never), "etag "+never+" was never issued for it (its etag is "+e2+")")
	_, err = store.Save(t.Context(), addr, []byte("x"), never)
	want(err, "etag "+never+" was never issued")
	if err := store.Delete(t.Context(), addr, e2); err != nil {
		t.Fatal(err)
	}
	want(store.Delete(t.Context(), addr, e2), "etag "+e2+" names no state")
}
