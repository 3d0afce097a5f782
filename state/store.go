package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Store is a grain.StateStore that may hold resources of its own. Its
// methods are safe for concurrent use.
type Store interface {
	grain.StateStore
	// Close releases what the store opened itself (Open's PostgreSQL
	// pool); an etcd client or a pool it was given stays open.
	Close() error
}

var (
	_ Store = (*Etcd)(nil)
	_ Store = (*Postgres)(nil)
)

// Open returns the state store that spec names, as a silo's --state-store
// flag takes it:
//
//   - "" or "etcd": the etcd store (NewEtcd) on etcdClient, under prefix
//     (the silo's etcd and --etcd-prefix);
//   - "postgres://..." or "postgresql://...": a PostgreSQL store on a pgx
//     pool of its own (the URL's pool_max_conns and the other pgxpool
//     settings apply), in table agentsilo_state, created if missing. It
//     connects before returning; Close closes the pool.
//
// A spec it does not know, or a URL pgx cannot parse, is InvalidArgument;
// a database it cannot reach is Unavailable.
func Open(ctx context.Context, spec string, etcdClient *clientv3.Client, prefix string) (Store, error) {
	switch {
	case spec == "" || spec == "etcd":
		if etcdClient == nil {
			return nil, errs.New(codes.InvalidArgument, "state store etcd: no etcd client")
		}
		return NewEtcd(etcdClient, prefix), nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		// Not returned directly: a nil *Postgres in a Store is not nil.
		s, err := OpenPostgres(ctx, spec)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		scheme = spec
	}
	return nil, errs.New(codes.InvalidArgument, "state store %q: want \"etcd\" or a postgres:// URL", clip(scheme))
}

// parseETag turns an etag of this package's stores (a positive decimal
// version; "" for none) into its number.
func parseETag(etag string, what fmt.Stringer) (int64, error) {
	if etag == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(etag, 10, 64)
	if err != nil || n <= 0 {
		return 0, errs.New(codes.InvalidArgument, "%s: etag %q is not one this store made", what, clip(etag))
	}
	return n, nil
}

// conflict is the error of a write whose etag is not the state's: current
// is the state's version as the store found it after the write failed (0:
// there is no state; -1: not known). Versions only grow, so an etag above
// the current one was never issued for the state.
func conflict(what fmt.Stringer, etag string, current int64) error {
	if etag == "" {
		return errs.New(codes.Aborted, "%s: it already exists (etag \"\" says it must not): load it first", what)
	}
	n, _ := strconv.ParseInt(etag, 10, 64)
	switch {
	case current == 0:
		return errs.New(codes.Aborted, "%s: etag %s names no state: there is none (deleted, or never saved); load it again", what, etag)
	case current > 0 && n > current:
		return errs.New(codes.Aborted, "%s: etag %s was never issued for it (its etag is %d); load it again", what, etag, current)
	case current > 0:
		return errs.New(codes.Aborted, "%s: etag %s is stale: another write came first; load it again", what, etag)
	}
	return errs.New(codes.Aborted, "%s: etag %s is not its current one (another write came first, or it was never issued); load it again", what, etag)
}

// callerError returns the caller's own cancellation or deadline as such, or
// nil if ctx has not ended.
func callerError(ctx context.Context, what fmt.Stringer) error {
	cerr := ctx.Err()
	if cerr == nil {
		return nil
	}
	code := codes.Canceled
	if errors.Is(cerr, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	return errs.New(code, "%s: %w", what, cerr)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// op names a store call for its errors, formatted only if there is one.
type op struct {
	verb string
	addr grain.Address
}

func opOn(verb string, addr grain.Address) op { return op{verb, addr} }

// text is a fixed description.
type text string

func (t text) String() string { return string(t) }

func (o op) String() string { return fmt.Sprintf("%s the state of %s", o.verb, o.addr) }
