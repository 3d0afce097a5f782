package grain

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// ErrConflict is the error of a state save or delete whose etag is stale:
// another write came first. It is errs.ErrAborted (gRPC Aborted); test for
// it with errors.Is(err, grain.ErrConflict) or status.Code(err) ==
// codes.Aborted, then load the state again and retry.
var ErrConflict = errs.ErrAborted

// StateStore keeps agents' state: one opaque value per agent address,
// versioned by an etag. Package state implements it on etcd and on
// PostgreSQL; MemoryStateStore is the one for tests. The runtime calls it
// from Host.LoadState, SaveState and DeleteState; its methods are called
// concurrently, from any goroutine.
//
// An etag is an opaque, non-empty string naming one stored version of one
// address's state; "" stands for "no state". A store never gives the same
// address the same etag twice, even across a delete, so a write conditioned
// on an old etag cannot succeed by chance.
type StateStore interface {
	// Load returns addr's state and its etag, or nil, "" and no error if
	// addr has none.
	Load(ctx context.Context, addr Address) (data []byte, etag string, err error)
	// Save stores data as addr's state if the stored etag is etag (""
	// meaning addr has no state yet) and returns the new etag. Otherwise it
	// writes nothing and returns ErrConflict. The store does not keep data.
	Save(ctx context.Context, addr Address, data []byte, etag string) (newETag string, err error)
	// Delete removes addr's state if the stored etag is etag, else returns
	// ErrConflict. With etag "", it succeeds if addr has no state.
	Delete(ctx context.Context, addr Address, etag string) error
}

// errNoState is what the state methods of Host return on a silo without a
// state store.
func errNoState(addr Address) error {
	return errs.New(codes.FailedPrecondition, "agent state of %s: this silo has no state store configured (grain.Config.State)", addr)
}

// stateCursor is what an activation remembers of its state calls: a write
// whose outcome it does not know. The state calls of one activation run one
// at a time (turn is a lock bounded by the caller's context).
type stateCursor struct {
	turn chan struct{} // holds one token while a state call runs
	// lost is the last save or delete that failed without saying whether
	// it was applied (a timeout, Unavailable), or nil. Guarded by turn.
	lost *lostWrite
	// refused is the etag of a save refused as applied already under an
	// idempotency key (see saveKeyed), or "". Guarded by turn.
	refused string
	// keyedTurn and keyedID name the turn, and its message, whose save
	// recorded their idempotency key (see saveKeyed): the turn's address
	// (not a pointer, which would keep the turn and its message) and the
	// message's id. Guarded by turn.
	keyedTurn uintptr
	keyedID   string
}

// lostWrite is a write whose outcome is unknown.
type lostWrite struct {
	before  string // the etag it was conditioned on
	data    []byte // what it stored (a save)
	deleted bool   // it was a delete
}

func (c *stateCursor) lock(ctx context.Context, what string) error {
	select {
	case c.turn <- struct{}{}:
		return nil // free: go on even with a done ctx, which the store then sees
	default:
	}
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctxError(ctx, what)
	}
}

func (c *stateCursor) unlock() { <-c.turn }

// cursor returns a's stateCursor, made at its first state call: most
// activations never make one, and an idle activation should be small.
func (a *activation) cursor() *stateCursor {
	if c := a.state.Load(); c != nil {
		return c
	}
	c := &stateCursor{turn: make(chan struct{}, 1)}
	if a.state.CompareAndSwap(nil, c) {
		return c
	}
	return a.state.Load()
}

// outcomeUnknown reports whether a write that returned err may or may not
// have been applied. The codes listed are definite refusals.
func outcomeUnknown(err error) bool {
	switch errs.Code(err) {
	case codes.OK, codes.Aborted, codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition,
		codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
		return false
	}
	return true
}

// LoadState implements Host.
func (a *activation) LoadState(ctx context.Context) ([]byte, string, error) {
	st := a.rt.cfg.State
	if st == nil {
		return nil, "", errNoState(a.address())
	}
	if err := a.cursor().lock(ctx, "load the state of "+a.key); err != nil {
		return nil, "", err
	}
	defer a.cursor().unlock()
	data, etag, err := st.Load(ctx, a.address())
	if err != nil {
		return nil, "", err
	}
	a.cursor().lost = nil // the agent now holds the stored etag
	a.cursor().refused = ""
	return data, etag, nil
}

// SaveState implements Host.
func (a *activation) SaveState(ctx context.Context, data []byte, etag string) (string, error) {
	st := a.rt.cfg.State
	if st == nil {
		return "", errNoState(a.address())
	}
	if err := a.rt.awaitServing(ctx); err != nil {
		return "", err // a fenced silo writes nothing; see Host.Serving
	}
	if err := a.cursor().lock(ctx, "save the state of "+a.key); err != nil {
		return "", err
	}
	defer a.cursor().unlock()
	if a.cursor().lost != nil {
		use, stored, err := a.resolve(ctx, st, etag, data, false)
		if err != nil || stored != "" {
			return stored, err
		}
		etag = use
	}
	next, err := a.saveKeyed(ctx, st, data, etag)
	if err != nil && outcomeUnknown(err) {
		a.cursor().lost = &lostWrite{before: etag, data: bytes.Clone(data)}
	}
	return next, err
}

// DeleteState implements Host.
func (a *activation) DeleteState(ctx context.Context, etag string) error {
	st := a.rt.cfg.State
	if st == nil {
		return errNoState(a.address())
	}
	if err := a.rt.awaitServing(ctx); err != nil {
		return err
	}
	if err := a.cursor().lock(ctx, "delete the state of "+a.key); err != nil {
		return err
	}
	defer a.cursor().unlock()
	if a.cursor().lost != nil {
		use, stored, err := a.resolve(ctx, st, etag, nil, true)
		if err != nil || stored != "" {
			return err
		}
		etag = use
	}
	err := st.Delete(ctx, a.address(), etag)
	if err != nil && outcomeUnknown(err) {
		a.cursor().lost = &lostWrite{before: etag, deleted: true}
	}
	return err
}

// resolve finds out what became of the lost write before the agent writes
// again with etag (data, or a delete if del). It reads the stored state:
//
//   - still at the lost write's etag: the write did not land, and the
//     agent's etag stands;
//   - holding what the lost write wrote (or nothing, for a lost delete): it
//     landed, and the agent's etag, the one the lost write was conditioned
//     on, is taken as the one the write made; if the agent is repeating that
//     very write, it is done already and stored says so ("-" for a delete);
//   - anything else: another writer came in, and the agent's etag is stale:
//     ErrConflict.
//
// An agent that passes another etag than the lost write's gets it judged by
// the store as usual. If the read fails, the write stays lost.
func (a *activation) resolve(ctx context.Context, st StateStore, etag string, data []byte, del bool) (use, stored string, err error) {
	lost := a.cursor().lost
	cur, curETag, err := st.Load(ctx, a.address())
	if err != nil {
		return "", "", err
	}
	a.cursor().lost = nil
	if etag != lost.before || curETag == lost.before {
		return etag, "", nil
	}
	landed := curETag == "" && lost.deleted || curETag != "" && !lost.deleted && bytes.Equal(cur, lost.data)
	switch {
	case !landed:
		return "", "", errs.New(codes.Aborted, "the state of %s changed while the outcome of an earlier write was unknown: etag %q is stale; load it again", a.key, etag)
	case del && lost.deleted:
		return "", "-", nil
	case !del && !lost.deleted && bytes.Equal(data, lost.data):
		return "", curETag, nil
	}
	return curETag, "", nil
}

// LoadJSON loads the agent's state through h and decodes it from JSON into a
// T. With no state stored, it returns T's zero value and etag "". If the
// stored state does not decode, it returns the etag with an Internal error,
// so that the agent may overwrite it.
func LoadJSON[T any](ctx context.Context, h Host) (v T, etag string, err error) {
	data, etag, err := h.LoadState(ctx)
	if err != nil || etag == "" {
		return v, etag, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, etag, errs.New(codes.Internal, "the state of %s does not decode into %T: %v", h.Address(), v, err)
	}
	return v, etag, nil
}

// SaveJSON encodes v as JSON and saves it as the agent's state through h if
// the stored etag is etag (see Host.SaveState); it returns the new etag.
func SaveJSON[T any](ctx context.Context, h Host, v T, etag string) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", errs.New(codes.InvalidArgument, "encode the state of %s: %v", h.Address(), err)
	}
	return h.SaveState(ctx, data, etag)
}

// maxUpdateTries bounds State.Update's attempts.
const maxUpdateTries = 8

// State is an agent's state of type T, kept as JSON in the silo's state
// store, that remembers the etag it was loaded from or saved as:
//
//	type Notes struct{ Lines []string }
//
//	func (a *agent) OnActivate(ctx context.Context) error {
//		a.notes = grain.NewState[Notes](a.host)
//		return a.notes.Load(ctx)
//	}
//
//	// in OnMessage:
//	a.notes.Value.Lines = append(a.notes.Value.Lines, m.Message)
//	if err := a.notes.Save(ctx); errors.Is(err, grain.ErrConflict) { ... }
//
// A State is not safe for concurrent use: keep it in the agent and use it in
// its turns.
type State[T any] struct {
	// Value is the state, as last loaded or saved, or as changed since.
	Value T
	host  Host
	etag  string
}

// NewState returns the state of h's agent, not loaded yet: Value is T's zero
// value and Exists is false until Load.
func NewState[T any](h Host) *State[T] { return &State[T]{host: h} }

// Load reads the stored state into Value (T's zero value if there is none).
func (s *State[T]) Load(ctx context.Context) error {
	v, etag, err := LoadJSON[T](ctx, s.host)
	if err != nil {
		return err
	}
	s.Value, s.etag = v, etag
	return nil
}

// Save stores Value if nobody else wrote since this State last loaded or
// saved; else it returns ErrConflict and leaves Value as it is.
func (s *State[T]) Save(ctx context.Context) error {
	etag, err := SaveJSON(ctx, s.host, s.Value, s.etag)
	if err != nil {
		return err
	}
	s.etag = etag
	return nil
}

// Delete removes the stored state if nobody else wrote since this State last
// loaded or saved (else ErrConflict), and resets Value to T's zero value.
func (s *State[T]) Delete(ctx context.Context) error {
	if err := s.host.DeleteState(ctx, s.etag); err != nil {
		return err
	}
	var zero T
	s.Value, s.etag = zero, ""
	return nil
}

// Update applies change to Value and saves it; on ErrConflict it loads the
// stored state and applies change again, a few times at most (then it
// returns the conflict). An error from change ends it unsaved, with Value as
// change left it. On another error from the save (Unavailable, a timeout)
// Value keeps the change, which may or may not be stored: Load to start
// again from the stored state, or Update again (see Host.SaveState for how
// the next save finds out).
func (s *State[T]) Update(ctx context.Context, change func(v *T) error) error {
	var err error
	for range maxUpdateTries {
		if err = change(&s.Value); err != nil {
			return err
		}
		if err = s.Save(ctx); err == nil || errs.Code(err) != codes.Aborted {
			return err
		}
		if err = s.Load(ctx); err != nil {
			return err
		}
	}
	return err
}

// ETag returns the etag of the stored version Value came from or was saved
// as; "" if there was none.
func (s *State[T]) ETag() string { return s.etag }

// Exists reports whether the state was stored when last loaded or saved.
func (s *State[T]) Exists() bool { return s.etag != "" }

// MemoryStateStore is a StateStore in memory, for tests. Its etags come from
// one counter, so none is ever reused.
type MemoryStateStore struct {
	mu     sync.Mutex
	rev    uint64
	states map[Address]memoryState
}

type memoryState struct {
	data []byte
	rev  uint64
}

// NewMemoryStateStore returns an empty store.
func NewMemoryStateStore() *MemoryStateStore {
	return &MemoryStateStore{states: make(map[Address]memoryState)}
}

// Load implements StateStore.
func (s *MemoryStateStore) Load(ctx context.Context, addr Address) ([]byte, string, error) {
	if ctx.Err() != nil {
		return nil, "", ctxError(ctx, "load the state of "+addr.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[addr]
	if !ok {
		return nil, "", nil
	}
	return bytes.Clone(st.data), strconv.FormatUint(st.rev, 10), nil
}

// Save implements StateStore.
func (s *MemoryStateStore) Save(ctx context.Context, addr Address, data []byte, etag string) (string, error) {
	what := "save the state of " + addr.String()
	if ctx.Err() != nil {
		return "", ctxError(ctx, what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(addr, etag, what); err != nil {
		return "", err
	}
	s.rev++
	if data == nil {
		data = []byte{}
	}
	s.states[addr] = memoryState{data: bytes.Clone(data), rev: s.rev}
	return strconv.FormatUint(s.rev, 10), nil
}

// Delete implements StateStore.
func (s *MemoryStateStore) Delete(ctx context.Context, addr Address, etag string) error {
	what := "delete the state of " + addr.String()
	if ctx.Err() != nil {
		return ctxError(ctx, what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(addr, etag, what); err != nil {
		return err
	}
	delete(s.states, addr)
	return nil
}

func (s *MemoryStateStore) checkLocked(addr Address, etag, what string) error {
	var want uint64
	if etag != "" {
		n, err := strconv.ParseUint(etag, 10, 64)
		if err != nil || n == 0 {
			return errs.New(codes.InvalidArgument, "%s: etag %q is not one this store made", what, etag)
		}
		want = n
	}
	if cur := s.states[addr]; cur.rev != want {
		if want == 0 {
			return errs.New(codes.Aborted, "%s: it already exists (etag \"\" says it must not)", what)
		}
		return errs.New(codes.Aborted, "%s: etag %q is stale", what, etag)
	}
	return nil
}
