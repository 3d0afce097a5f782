package grain

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/retry"
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

// StateLister is a StateStore that lists the agents it holds state for:
// the stores of package state, and MemoryStateStore, are. A silo's
// gateway lists stored agents with it (the SDK's Agents.Stored).
type StateLister interface {
	StateStore
	// List returns the addresses of type typ and owner that have state,
	// in the order of their aliases, starting after the alias after (""
	// for the first), at most limit of them (limit > 0).
	List(ctx context.Context, typ, owner, after string, limit int) ([]Address, error)
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
	// keyedTurn is the turn whose save recorded its message's idempotency
	// key (see saveKeyed): its later saves are plain ones. A weak pointer,
	// so that it neither keeps the turn alive nor matches a later turn
	// that happens to be allocated where a finished one was (a message
	// sent again keeps its id, so neither the address nor the id names a
	// turn). Guarded by turn.
	keyedTurn weak.Pointer[turn]
}

// lostWrite is a write whose outcome is unknown.
type lostWrite struct {
	before  string // the etag it was conditioned on
	data    []byte // what it stored (a save)
	deleted bool   // it was a delete
	// keyed is the turn, if the write was a save recording that turn's
	// idempotency key: if it turns out to have landed, the key is recorded.
	keyed weak.Pointer[turn]
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
	if errs.Code(err) == codes.Unavailable && ctx.Err() == nil {
		data, etag, err = a.settleLoad(ctx, st, err)
	}
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
		lost := &lostWrite{before: etag, data: bytes.Clone(data)}
		if t := turnFrom(ctx); t != nil && t.act == a && t.msg != nil && t.msg.IdempotencyKey != "" {
			if _, ok := st.(KeyedStateStore); ok && a.cursor().keyedTurn.Value() != t {
				lost.keyed = weak.Make(t)
			}
		}
		a.cursor().lost = lost
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
		err = a.settleDelete(ctx, st, etag, err)
	}
	if err != nil && outcomeUnknown(err) {
		a.cursor().lost = &lostWrite{before: etag, deleted: true}
	}
	return err
}

// resolve finds out what became of the lost write before the agent writes
// again with etag (data, or a delete if del). It reads the stored state:
//
//   - still at the lost write's etag: the write did not land. The agent's
//     etag stands for a delete, after a lost delete, and for the very
//     same save again (made now instead); but a different save after a
//     lost save is refused with ErrConflict: the agent's value may hold
//     the change that was not stored (a State keeps the change of a failed
//     save), and writing it would apply that change along with the new
//     one. Load and apply the change again;
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
	if etag != lost.before {
		return etag, "", nil
	}
	if curETag == lost.before {
		if del || lost.deleted || bytes.Equal(data, lost.data) {
			return etag, "", nil
		}
		return "", "", errs.New(codes.Aborted, "the state of %s: an earlier write whose outcome was unknown did not land, so the value at hand may hold a change that was not stored; load it again", a.key)
	}
	landed := curETag == "" && lost.deleted || curETag != "" && !lost.deleted && bytes.Equal(cur, lost.data)
	if landed {
		if t := lost.keyed.Value(); t != nil {
			// The lost save recorded its turn's idempotency key.
			a.cursor().keyedTurn = lost.keyed
		}
	}
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

// settleBudget bounds how long a write whose outcome is unknown is retried
// to learn it, when the caller set no deadline (a one-way turn).
const settleBudget = 10 * time.Second

// settlePolicy paces those retries: an etcd leader election takes a second
// or two, a PostgreSQL failover longer.
var settlePolicy = retry.Policy{Min: 50 * time.Millisecond, Max: time.Second}

// settling returns the context the retries of an unknown write run under:
// ctx, bounded by settleBudget if it has no deadline of its own.
func settling(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, settleBudget)
}

// save saves data at etag; if the store fails leaving the outcome unknown
// (etcd lost its leader or a connection under the write), it learns the
// outcome by making the save again while the caller's deadline allows: the
// store's condition on the etag (and, keyed, on the idempotency key) makes
// a second attempt safe, and its answer tells what became of the first:
//
//   - it succeeds: the first did not land (it never can now: the etag
//     moved);
//   - it is refused as applied already (keyed): the key is recorded; if
//     the stored state is what this save wrote, at the etag the key's
//     record names, the first landed, and that etag is returned;
//     otherwise an earlier attempt of the key did, and ErrApplied stands;
//   - it is refused as stale: if the stored state is what this save wrote,
//     the first landed, and the stored etag is returned; otherwise another
//     write came in, and the conflict stands.
//
// If the store stays away until the deadline, the first error is returned.
//
// save makes the first attempt too: a keyed one (ks.SaveKeyed) if key is
// set, else a plain st.Save.
func (a *activation) save(ctx context.Context, st StateStore, ks KeyedStateStore, data []byte, etag, key string) (string, error) {
	attempt := func(ctx context.Context) (string, error) {
		if key != "" {
			return ks.SaveKeyed(ctx, a.address(), data, etag, key)
		}
		return st.Save(ctx, a.address(), data, etag)
	}
	next, first := attempt(ctx)
	if first == nil || !outcomeUnknown(first) {
		return next, first
	}
	ctx, cancel := settling(ctx)
	defer cancel()
	b := settlePolicy.New(a.rt.clock)
	for b.Wait(ctx, nil) {
		next, err := attempt(ctx)
		switch {
		case err == nil:
			return next, nil
		case outcomeUnknown(err):
			continue
		case errs.Code(err) == codes.AlreadyExists && key != "":
			at, ok, aerr := ks.Applied(ctx, a.address(), key)
			if aerr != nil {
				continue
			}
			cur, curETag, lerr := st.Load(ctx, a.address())
			if lerr != nil {
				continue
			}
			if ok && curETag == at && bytes.Equal(cur, data) {
				return curETag, nil
			}
			return "", err
		case errs.Code(err) == codes.Aborted:
			cur, curETag, lerr := st.Load(ctx, a.address())
			if lerr != nil {
				continue
			}
			if curETag != "" && bytes.Equal(cur, data) {
				return curETag, nil
			}
			return "", err
		default:
			return "", err
		}
	}
	return "", first
}

// settleLoad reads again, while ctx allows (as save writes again), after a
// load that failed with err, Unavailable: the store was away for a moment
// (an etcd leader election). If it stays away, err is returned.
func (a *activation) settleLoad(ctx context.Context, st StateStore, err error) ([]byte, string, error) {
	ctx, cancel := settling(ctx)
	defer cancel()
	b := settlePolicy.New(a.rt.clock)
	for b.Wait(ctx, nil) {
		data, etag, lerr := st.Load(ctx, a.address())
		if errs.Code(lerr) != codes.Unavailable {
			return data, etag, lerr
		}
	}
	return nil, "", err
}

// settleDelete is save's retries for a delete that failed with err.
func (a *activation) settleDelete(ctx context.Context, st StateStore, etag string, err error) error {
	ctx, cancel := settling(ctx)
	defer cancel()
	b := settlePolicy.New(a.rt.clock)
	first := err
	for b.Wait(ctx, nil) {
		err := st.Delete(ctx, a.address(), etag)
		switch {
		case err == nil:
			return nil
		case outcomeUnknown(err):
			continue
		case errs.Code(err) == codes.Aborted:
			_, curETag, lerr := st.Load(ctx, a.address())
			if lerr != nil {
				continue
			}
			if curETag == "" {
				return nil
			}
			return err
		default:
			return err
		}
	}
	return first
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
		return v, etag, errs.New(codes.Internal, "the state of %s does not decode into %T: %w", h.Address(), v, err)
	}
	return v, etag, nil
}

// SaveJSON encodes v as JSON and saves it as the agent's state through h if
// the stored etag is etag (see Host.SaveState); it returns the new etag.
func SaveJSON[T any](ctx context.Context, h Host, v T, etag string) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", errs.New(codes.InvalidArgument, "encode the state of %s: %w", h.Address(), err)
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

// List implements StateLister.
func (s *MemoryStateStore) List(ctx context.Context, typ, owner, after string, limit int) ([]Address, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, "list the agents of "+typ+":"+owner+" with state")
	}
	s.mu.Lock()
	var out []Address
	for a := range s.states {
		if a.Type == typ && a.Owner == owner && a.Alias > after {
			out = append(out, a)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(x, y Address) int { return strings.Compare(x.Alias, y.Alias) })
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, nil
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
