package state

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// lossyStore is the etcd store with a fault injected after the commit: the
// next lose saves land in etcd, and then their reply is lost (as when the
// etcd leader changes, or the request times out, after the write was
// applied).
//
// While down is set (and, with stay set, from the first lost reply on),
// every call fails with Unavailable before reaching etcd: the store is away
// for the runtime's retries of a write in doubt, which then end with the
// caller's deadline and leave it in doubt.
type lossyStore struct {
	grain.KeyedStateStore
	lose       atomic.Int32
	down, stay atomic.Bool
	saved      chan struct{} // if not nil, told of every save that landed
}

var errAway = errs.New(codes.Unavailable, "etcd unavailable: the store is away (injected)")

func (s *lossyStore) afterCommit(etag string, err error) (string, error) {
	if err == nil && s.saved != nil {
		s.saved <- struct{}{}
	}
	if err == nil && s.lose.Add(-1) >= 0 {
		if s.stay.Load() {
			s.down.Store(true)
		}
		return "", errs.New(codes.Unavailable, "etcd unavailable: the reply was lost after the commit (injected)")
	}
	return etag, err
}

func (s *lossyStore) Load(ctx context.Context, addr grain.Address) ([]byte, string, error) {
	if s.down.Load() {
		return nil, "", errAway
	}
	return s.KeyedStateStore.Load(ctx, addr)
}

func (s *lossyStore) Applied(ctx context.Context, addr grain.Address, key string) (string, bool, error) {
	if s.down.Load() {
		return "", false, errAway
	}
	return s.KeyedStateStore.Applied(ctx, addr, key)
}

func (s *lossyStore) Save(ctx context.Context, addr grain.Address, data []byte, etag string) (string, error) {
	if s.down.Load() {
		return "", errAway
	}
	return s.afterCommit(s.KeyedStateStore.Save(ctx, addr, data, etag))
}

func (s *lossyStore) SaveKeyed(ctx context.Context, addr grain.Address, data []byte, etag, key string) (string, error) {
	if s.down.Load() {
		return "", errAway
	}
	return s.afterCommit(s.KeyedStateStore.SaveKeyed(ctx, addr, data, etag, key))
}

// away makes the store lose the next reply and stay away until back is
// called.
func (s *lossyStore) away() (back func()) {
	s.stay.Store(true)
	s.lose.Store(1)
	return func() {
		s.stay.Store(false)
		s.down.Store(false)
		s.lose.Store(0)
	}
}

// tally is a counter agent: "add" adds one to its stored count (with
// State.Update) and replies with the count; "add2" adds one twice, saving
// each time; "add-wait" also waits, after
// the save, for its caller to give up.
type tally struct{ n *grain.State[int] }

func (c *tally) OnActivate(ctx context.Context) error { return c.n.Load(ctx) }

func (c *tally) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if err := c.n.Update(ctx, func(n *int) error { *n++; return nil }); err != nil {
		return nil, err
	}
	if m.Message == "add2" {
		if err := c.n.Update(ctx, func(n *int) error { *n++; return nil }); err != nil {
			return nil, err
		}
	}
	if m.Message == "add-wait" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	r := m.Response()
	r.Message = strconv.Itoa(c.n.Value)
	return r, nil
}

func tallyRuntime(t *testing.T, store grain.StateStore) *grain.Runtime {
	t.Helper()
	reg := grain.NewRegistry()
	if err := reg.Register("Tally", func(h grain.Host) (grain.Agent, error) {
		return &tally{n: grain.NewState[int](h)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = store
	rt, err := grain.New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// An Ask under an idempotency key whose save landed in etcd but whose
// reply was lost says that its change landed, and a retry under the same
// key does not apply it twice: on the same silo (the runtime remembers the
// save's unknown outcome and asks etcd), after a restart (the key recorded
// with the save refuses the retry's save), and when the caller gave up
// after the save. The count is then right for the next request.
func TestKeyedSaveExactlyOnce(t *testing.T) {
	exactlyOnce(t, NewEtcd(etcdtest.Start(t).Client(t), "/idem"))
}

// exactlyOnce is TestKeyedSaveExactlyOnce on ks (the PostgreSQL store's
// test runs it too).
func exactlyOnce(t *testing.T, ks grain.KeyedStateStore) {
	store := &lossyStore{KeyedStateStore: ks}
	ctx := t.Context()
	ask := func(rt *grain.Runtime, to, text, key string) (*grain.Message, error) {
		return rt.Ask(ctx, &grain.Message{From: "Session:alice:s", To: to, Message: text, IdempotencyKey: key})
	}
	stored := func(alias string) int {
		t.Helper()
		data, _, err := store.Load(ctx, grain.Address{Type: "Tally", Owner: "alice", Alias: alias})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := json.Unmarshal(data, &n); err != nil {
			t.Fatalf("stored %q: %v", data, err)
		}
		return n
	}
	wantApplied := func(err error) {
		t.Helper()
		if !errors.Is(err, grain.ErrApplied) || errs.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "landed") {
			t.Fatalf("retry: %v (code %v), want ErrApplied saying the change landed", err, errs.Code(err))
		}
	}

	// inDoubt asks with a deadline that ends the runtime's retries of
	// the save while the store is away.
	inDoubt := func(rt *grain.Runtime, to, text, key string) error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := rt.Ask(dctx, &grain.Message{From: "Session:alice:s", To: to, Message: text, IdempotencyKey: key})
		return err
	}
	mayHaveRun := func(err error) {
		t.Helper()
		if c := errs.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded || !strings.Contains(err.Error(), "may have") {
			t.Fatalf("lost reply: %v, want Unavailable or DeadlineExceeded saying the change may have landed", err)
		}
	}

	t.Run("reply lost, learnt at once", func(t *testing.T) {
		// The leader change case: the reply of a save that landed is
		// lost, etcd is back at once, and the runtime learns by the key
		// that the save landed: the Ask succeeds, once.
		rt := tallyRuntime(t, store)
		if r, err := ask(rt, "Tally:e", "add", ""); err != nil || r.Message != "1" {
			t.Fatalf("first add: %v %v", r, err)
		}
		store.lose.Store(1)
		if r, err := ask(rt, "Tally:e", "add", "k1"); err != nil || r.Message != "2" {
			t.Fatalf("add whose reply was lost: %v %v, want 2", r, err)
		}
		if r, err := ask(rt, "Tally:e", "add", "k1"); err != nil || r.Message != "2" {
			t.Fatalf("retry: %v %v, want the first's reply, 2", r, err)
		}
		if n := stored("e"); n != 2 {
			t.Fatalf("stored %d, want 2", n)
		}
	})

	t.Run("store away before the write", func(t *testing.T) {
		// Nothing landed; the agent's value holds the change that was
		// not stored. The retry under the same key runs, and applies the
		// change once, not twice.
		rt := tallyRuntime(t, store)
		if r, err := ask(rt, "Tally:f", "add", ""); err != nil || r.Message != "1" {
			t.Fatalf("first add: %v %v", r, err)
		}
		store.down.Store(true)
		err := inDoubt(rt, "Tally:f", "add", "k1")
		store.down.Store(false)
		if err == nil {
			t.Fatal("add with the store away succeeded")
		}
		if r, err := ask(rt, "Tally:f", "add", "k1"); err != nil || r.Message != "2" {
			t.Fatalf("retry: %v %v, want 2 (the change applied once)", r, err)
		}
		if r, err := ask(rt, "Tally:f", "add", "k1"); err != nil || r.Message != "2" {
			t.Fatalf("second retry: %v %v, want the first's reply", r, err)
		}
		if n := stored("f"); n != 2 {
			t.Fatalf("stored %d, want 2", n)
		}
	})

	t.Run("same silo", func(t *testing.T) {
		rt := tallyRuntime(t, store)
		if r, err := ask(rt, "Tally:a", "add", ""); err != nil || r.Message != "1" {
			t.Fatalf("first add: %v %v", r, err)
		}
		back := store.away()
		err := inDoubt(rt, "Tally:a", "add", "k1")
		back()
		mayHaveRun(err)
		if n := stored("a"); n != 2 {
			t.Fatalf("stored %d after the lost reply, want 2 (the save landed)", n)
		}
		for range 2 {
			_, err = ask(rt, "Tally:a", "add", "k1")
			wantApplied(err)
		}
		if n := stored("a"); n != 2 {
			t.Fatalf("stored %d after the retries, want 2", n)
		}
		if r, err := ask(rt, "Tally:a", "add", "k2"); err != nil || r.Message != "3" {
			t.Fatalf("next add: %v %v, want 3", r, err)
		}
		// A keyed turn may save more than once.
		if r, err := ask(rt, "Tally:a", "add2", "k3"); err != nil || r.Message != "5" {
			t.Fatalf("add2: %v %v, want 5", r, err)
		}
	})

	t.Run("restart", func(t *testing.T) {
		rt1 := tallyRuntime(t, store)
		if r, err := ask(rt1, "Tally:b", "add", ""); err != nil || r.Message != "1" {
			t.Fatalf("first add: %v %v", r, err)
		}
		back := store.away()
		err := inDoubt(rt1, "Tally:b", "add", "k1")
		back()
		mayHaveRun(err)
		if err := rt1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// A new runtime knows nothing of k1: the retry runs, and its save
		// is refused by the key recorded with the first.
		rt2 := tallyRuntime(t, store)
		_, err = ask(rt2, "Tally:b", "add", "k1")
		wantApplied(err)
		if n := stored("b"); n != 2 {
			t.Fatalf("stored %d after the retry on a new runtime, want 2", n)
		}
		// The agent's value held the refused change: its next save with
		// that etag is a conflict, and Update loads the stored count.
		if r, err := ask(rt2, "Tally:b", "add", ""); err != nil || r.Message != "3" {
			t.Fatalf("next add: %v %v, want 3", r, err)
		}
	})

	t.Run("caller gave up after the save", func(t *testing.T) {
		store.saved = make(chan struct{}, 1)
		defer func() { store.saved = nil }()
		rt := tallyRuntime(t, store)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := rt.Ask(cctx, &grain.Message{From: "Session:alice:s", To: "Tally:c", Message: "add-wait", IdempotencyKey: "k1"})
			errc <- err
		}()
		<-store.saved
		cancel()
		if err := <-errc; errs.Code(err) != codes.Canceled {
			t.Fatalf("cancelled ask: %v", err)
		}
		_, err := ask(rt, "Tally:c", "add-wait", "k1")
		wantApplied(err)
		if n := stored("c"); n != 1 {
			t.Fatalf("stored %d, want 1", n)
		}
	})
}

// The etcd store keeps the key with the save, in one transaction, on a
// lease of at least KeyWindow.
func TestEtcdSaveKeyed(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	keyedConformance(t, NewEtcd(cli, "/keyed"))
	resp, err := cli.Get(t.Context(), "/keyed/state-keys/Notes:alice:n1/k")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("record: %v, %v", resp, err)
	}
	ttl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || ttl.GrantedTTL < int64(KeyWindow.Seconds()) {
		t.Fatalf("lease %+v, %v: want a TTL of at least %v", ttl, err, KeyWindow)
	}
}

// keyedConformance checks what a grain.KeyedStateStore promises: a second
// save under a key writes nothing, even with the new etag; Applied finds
// the key and the save's etag; another key, or another agent with the same
// key, is not affected; a save refused for its etag records no key.
func keyedConformance(t *testing.T, s grain.KeyedStateStore) {
	ctx := t.Context()
	a := grain.Address{Type: "Notes", Owner: "alice", Alias: "n1"}
	b := grain.Address{Type: "Notes", Owner: "alice", Alias: "n2"}
	if _, ok, err := s.Applied(ctx, a, "k"); ok || err != nil {
		t.Fatalf("Applied before any save = %v, %v", ok, err)
	}
	e1, err := s.SaveKeyed(ctx, a, []byte("one"), "", "k")
	if err != nil {
		t.Fatal(err)
	}
	if etag, ok, err := s.Applied(ctx, a, "k"); !ok || err != nil || etag != e1 {
		t.Fatalf("Applied = %q, %v, %v; want %q", etag, ok, err, e1)
	}
	_, err = s.SaveKeyed(ctx, a, []byte("two"), e1, "k")
	if !errors.Is(err, grain.ErrApplied) || !strings.Contains(err.Error(), e1) {
		t.Fatalf("second save under the key = %v, want ErrApplied naming etag %s", err, e1)
	}
	if data, etag, _ := s.Load(ctx, a); string(data) != "one" || etag != e1 {
		t.Fatalf("stored %q at %s after the refused save", data, etag)
	}
	if _, err := s.SaveKeyed(ctx, a, []byte("two"), e1, "k2"); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if _, err := s.SaveKeyed(ctx, b, []byte("b"), "", "k"); err != nil {
		t.Fatalf("another agent: %v", err)
	}
	_, err = s.SaveKeyed(ctx, a, []byte("three"), e1, "k3")
	wantConflict(t, err)
	if _, ok, _ := s.Applied(ctx, a, "k3"); ok {
		t.Fatal("a conflicting save recorded its key")
	}
}
