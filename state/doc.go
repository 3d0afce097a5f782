// Package state keeps agents' state for the grain runtime: the stores behind
// grain.Host's LoadState, SaveState and DeleteState (and grain.State[T]).
//
// An agent's state is one opaque value per agent address, versioned by an
// etag: a save or delete names the etag it read and is refused with
// grain.ErrConflict (gRPC Aborted) if another write came first, so two
// activations of one agent (a split cluster, a takeover) cannot overwrite each
// other unknowingly. Two stores implement grain.StateStore:
//
//   - Etcd, the default: the silo's own etcd, no other server. States live
//     under <prefix>state/<address>; the etag is the key's mod revision. A
//     state is at most MaxEtcdState (1 MiB).
//   - Postgres: one table (agentsilo_state, created if missing) in a
//     PostgreSQL database, through a pgx pool; the etag is a version from a
//     sequence. For large states and many agents.
//
// grain.MemoryStateStore is the in-memory twin, for tests.
//
// A silo opens its store from the --state-store flag with Open and gives it
// to the runtime:
//
//	st, err := state.Open(ctx, flagStateStore, etcd.Client(), etcd.Prefix())
//	...
//	defer st.Close()
//	gcfg.State = st
//
// Errors carry gRPC codes (package errs): Aborted for a stale etag,
// ResourceExhausted for a state over the store's limit, Unavailable when the
// store cannot be reached, and the caller's own DeadlineExceeded or Canceled
// when its context ends first.
package state
