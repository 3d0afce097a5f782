package state

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// DefaultTable is the PostgreSQL store's table.
const DefaultTable = "agentsilo_state"

// pgOpTimeout bounds each PostgreSQL request, as etcdOpTimeout does etcd's;
// longer, for states of many megabytes.
const pgOpTimeout = 10 * time.Second

var validTable = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// Postgres is the state store in PostgreSQL: one row per agent in a table
//
//	agentsilo_state(address text primary key, data bytea not null, version bigint not null)
//
// with versions drawn from the sequence agentsilo_state_version, so that no
// version is ever reused, even across a delete. The etag is the version in
// decimal. A save is an INSERT ... ON CONFLICT DO NOTHING for etag "" and an
// UPDATE ... WHERE version = etag otherwise; a delete is a DELETE ... WHERE
// version = etag. Methods are safe for concurrent use.
//
// A save under an idempotency key (SaveKeyed) also claims the row (address,
// key) of the table <table>_keys in the same transaction, and is refused if
// the row is there and younger than KeyWindow; older rows are removed by a
// sweep at most once a minute.
type Postgres struct {
	pool  *pgxpool.Pool
	own   bool // Close closes pool
	table string

	load, insert, update, del, exists, version string
	claimKey, setKey, keyVersion, sweepKeys    string

	sweepMu   sync.Mutex
	lastSweep time.Time
}

var _ grain.KeyedStateStore = (*Postgres)(nil)

// OpenPostgres connects a pool of its own to the database at url (a
// postgres:// URL or key=value string, as pgxpool.ParseConfig takes it) and
// returns the store in DefaultTable; Close closes the pool.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "state store: bad PostgreSQL URL")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "state store: PostgreSQL pool")
	}
	s, err := NewPostgres(ctx, pool, DefaultTable)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// NewPostgres returns the store in table (DefaultTable if ""), creating it
// and its sequence <table>_version if missing (silos starting together take
// turns through an advisory lock). Close leaves pool open.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, table string) (*Postgres, error) {
	if table == "" {
		table = DefaultTable
	}
	if !validTable.MatchString(table) {
		return nil, errs.New(codes.InvalidArgument, "state store: table name %q: want [a-z_][a-z0-9_]{0,50}", clip(table))
	}
	t := pgx.Identifier{table}.Sanitize()
	seq := pgx.Identifier{table + "_version"}.Sanitize()
	k := pgx.Identifier{table + "_keys"}.Sanitize()
	s := &Postgres{
		pool:    pool,
		table:   table,
		load:    `SELECT data, version FROM ` + t + ` WHERE address = $1`,
		insert:  `INSERT INTO ` + t + ` (address, data, version) VALUES ($1, $2, nextval('` + seq + `')) ON CONFLICT (address) DO NOTHING RETURNING version`,
		update:  `UPDATE ` + t + ` SET data = $2, version = nextval('` + seq + `') WHERE address = $1 AND version = $3 RETURNING version`,
		del:     `DELETE FROM ` + t + ` WHERE address = $1 AND version = $2`,
		exists:  `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE address = $1)`,
		version: `SELECT COALESCE((SELECT version FROM ` + t + ` WHERE address = $1), 0)`,
		// A fresh claim, or one over an expired row, returns a row; a
		// claim of a key recorded within the window returns none.
		claimKey:   `INSERT INTO ` + k + ` AS k (address, key, version, at) VALUES ($1, $2, 0, now()) ON CONFLICT (address, key) DO UPDATE SET version = 0, at = now() WHERE k.at < now() - make_interval(secs => $3) RETURNING version`,
		setKey:     `UPDATE ` + k + ` SET version = $3 WHERE address = $1 AND key = $2`,
		keyVersion: `SELECT version FROM ` + k + ` WHERE address = $1 AND key = $2 AND at >= now() - make_interval(secs => $3)`,
		sweepKeys:  `DELETE FROM ` + k + ` WHERE at < now() - make_interval(secs => $1)`,
	}
	what := text("create the state table " + table)
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	err := pgx.BeginFunc(octx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(octx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "agentsilo/state/"+table); err != nil {
			return err
		}
		if _, err := tx.Exec(octx, `CREATE SEQUENCE IF NOT EXISTS `+seq); err != nil {
			return err
		}
		if _, err := tx.Exec(octx, `CREATE TABLE IF NOT EXISTS `+t+` (address text PRIMARY KEY, data bytea NOT NULL, version bigint NOT NULL)`); err != nil {
			return err
		}
		_, err := tx.Exec(octx, `CREATE TABLE IF NOT EXISTS `+k+` (address text NOT NULL, key text NOT NULL, version bigint NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (address, key))`)
		return err
	})
	if err != nil {
		return nil, pgFail(ctx, what, err)
	}
	return s, nil
}

// Table returns the store's table.
func (s *Postgres) Table() string { return s.table }

// Load implements grain.StateStore.
func (s *Postgres) Load(ctx context.Context, addr grain.Address) ([]byte, string, error) {
	what := opOn("load", addr)
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var (
		data    []byte
		version int64
	)
	err := s.pool.QueryRow(octx, s.load, addr.String()).Scan(&data, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, "", nil
	case err != nil:
		return nil, "", pgFail(ctx, what, err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, strconv.FormatInt(version, 10), nil
}

// List implements grain.StateLister.
func (s *Postgres) List(ctx context.Context, typ, owner, after string, limit int) ([]grain.Address, error) {
	what := text("list the agents of type " + typ + " and owner " + owner + " with state")
	if !grain.ValidType(typ) || !grain.ValidName(owner) || limit <= 0 {
		return nil, errs.New(codes.InvalidArgument, "%s: want a type, an owner and a limit over 0", what)
	}
	prefix := typ + ":" + owner + ":"
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	rows, err := s.pool.Query(octx, `SELECT address FROM `+s.table+` WHERE starts_with(address, $1) AND address COLLATE "C" > $2 ORDER BY address COLLATE "C" LIMIT $3`, prefix, prefix+after, limit)
	if err != nil {
		return nil, pgFail(ctx, what, err)
	}
	defer rows.Close()
	var out []grain.Address
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, pgFail(ctx, what, err)
		}
		if alias := strings.TrimPrefix(a, prefix); grain.ValidName(alias) {
			out = append(out, grain.Address{Type: typ, Owner: owner, Alias: alias})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, pgFail(ctx, what, err)
	}
	return out, nil
}

// Save implements grain.StateStore.
func (s *Postgres) Save(ctx context.Context, addr grain.Address, data []byte, etag string) (string, error) {
	what := opOn("save", addr)
	version, err := parseETag(etag, what)
	if err != nil {
		return "", err
	}
	if data == nil {
		data = []byte{} // the column is NOT NULL
	}
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var row pgx.Row
	if version == 0 {
		row = s.pool.QueryRow(octx, s.insert, addr.String(), data)
	} else {
		row = s.pool.QueryRow(octx, s.update, addr.String(), data, version)
	}
	var next int64
	switch err := row.Scan(&next); {
	case errors.Is(err, pgx.ErrNoRows):
		return "", conflict(what, etag, s.current(octx, addr))
	case err != nil:
		return "", pgFailWrite(ctx, what, err)
	}
	return strconv.FormatInt(next, 10), nil
}

// SaveKeyed implements grain.KeyedStateStore: Save, and the claim of
// (addr, key) in the same transaction, unless key was claimed for addr
// within KeyWindow: then nothing is written and the error is
// grain.ErrApplied (AlreadyExists).
func (s *Postgres) SaveKeyed(ctx context.Context, addr grain.Address, data []byte, etag, key string) (string, error) {
	what := opOn("save", addr)
	version, err := parseETag(etag, what)
	if err != nil {
		return "", err
	}
	if data == nil {
		data = []byte{}
	}
	s.sweep(ctx)
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var next, applied int64
	var stale bool
	err = pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error {
		var claimed int64
		switch err := tx.QueryRow(octx, s.claimKey, addr.String(), key, KeyWindow.Seconds()).Scan(&claimed); {
		case errors.Is(err, pgx.ErrNoRows):
			if err := tx.QueryRow(octx, s.keyVersion, addr.String(), key, KeyWindow.Seconds()).Scan(&applied); err != nil {
				return err
			}
			return errApplied
		case err != nil:
			return err
		}
		var row pgx.Row
		if version == 0 {
			row = tx.QueryRow(octx, s.insert, addr.String(), data)
		} else {
			row = tx.QueryRow(octx, s.update, addr.String(), data, version)
		}
		switch err := row.Scan(&next); {
		case errors.Is(err, pgx.ErrNoRows):
			stale = true
			return errStale // roll back the claim
		case err != nil:
			return err
		}
		_, err := tx.Exec(octx, s.setKey, addr.String(), key, next)
		return err
	})
	switch {
	case stale:
		return "", conflict(what, etag, s.current(octx, addr))
	case errors.Is(err, errApplied):
		return "", errs.Wrap(codes.AlreadyExists, grain.ErrApplied, "%s: a save with idempotency key %q landed already (etag %d), so this one wrote nothing; its change is not applied twice", what, key, applied)
	case err != nil:
		return "", pgFailWrite(ctx, what, err)
	}
	return strconv.FormatInt(next, 10), nil
}

// errApplied and errStale end SaveKeyed's transaction, rolled back, when
// the key was claimed already or the etag is stale.
var (
	errApplied = errors.New("applied already")
	errStale   = errors.New("stale etag")
)

// Applied implements grain.KeyedStateStore.
func (s *Postgres) Applied(ctx context.Context, addr grain.Address, key string) (string, bool, error) {
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var v int64
	switch err := s.pool.QueryRow(octx, s.keyVersion, addr.String(), key, KeyWindow.Seconds()).Scan(&v); {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, pgFail(ctx, text("look up the idempotency key of a save of the state of "+addr.String()), err)
	}
	return strconv.FormatInt(v, 10), true, nil
}

// sweep removes the key claims older than KeyWindow, at most once a minute;
// a failure is left to the next.
func (s *Postgres) sweep(ctx context.Context) {
	s.sweepMu.Lock()
	due := time.Since(s.lastSweep) >= time.Minute
	if due {
		s.lastSweep = time.Now()
	}
	s.sweepMu.Unlock()
	if !due {
		return
	}
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	_, _ = s.pool.Exec(octx, s.sweepKeys, KeyWindow.Seconds())
}

// Delete implements grain.StateStore.
func (s *Postgres) Delete(ctx context.Context, addr grain.Address, etag string) error {
	what := opOn("delete", addr)
	version, err := parseETag(etag, what)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	if version == 0 {
		var exists bool
		if err := s.pool.QueryRow(octx, s.exists, addr.String()).Scan(&exists); err != nil {
			return pgFail(ctx, what, err)
		}
		if exists {
			return conflict(what, etag, -1)
		}
		return nil
	}
	tag, err := s.pool.Exec(octx, s.del, addr.String(), version)
	if err != nil {
		return pgFailWrite(ctx, what, err)
	}
	if tag.RowsAffected() == 0 {
		return conflict(what, etag, s.current(octx, addr))
	}
	return nil
}

// current is the version of the state at addr after a write that did not
// match its etag, 0 if there is none, -1 if it cannot be read.
func (s *Postgres) current(ctx context.Context, addr grain.Address) int64 {
	var v int64
	if err := s.pool.QueryRow(ctx, s.version, addr.String()).Scan(&v); err != nil {
		return -1
	}
	return v
}

// Close implements Store: it closes the pool if OpenPostgres opened it.
func (s *Postgres) Close() error {
	if s.own {
		s.pool.Close()
	}
	return nil
}

// pgFailWrite is pgFail for a write: a failure that does not say whether
// the write was applied (Unavailable, the caller's deadline) says that it
// may have landed.
func pgFailWrite(ctx context.Context, what fmt.Stringer, err error) error {
	switch e := pgFail(ctx, what, err); errs.Code(e) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return pgFail(ctx, text(what.String()+" (it may have landed: its outcome is unknown)"), err)
	default:
		return e
	}
}

// pgFail maps a PostgreSQL failure to its code: the caller's own
// cancellation or deadline first; then the server's SQLSTATE classes
// (insufficient resources and program limits are ResourceExhausted, a
// connection, shutdown or retryable transaction failure Unavailable,
// authorization failures Unauthenticated or PermissionDenied, data
// exceptions InvalidArgument, anything else Internal); and a database that
// cannot be reached or answered too late is Unavailable.
func pgFail(ctx context.Context, what fmt.Stringer, err error) error {
	if cerr := callerError(ctx, what); cerr != nil {
		return cerr
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code := codes.Internal
		switch c := pe.Code; {
		case strings.HasPrefix(c, "53"), c == "54000":
			code = codes.ResourceExhausted
		case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "57P"), strings.HasPrefix(c, "40"):
			code = codes.Unavailable
		case strings.HasPrefix(c, "28"):
			code = codes.Unauthenticated
		case c == "42501":
			code = codes.PermissionDenied
		case strings.HasPrefix(c, "22"):
			code = codes.InvalidArgument
		}
		return errs.Wrap(code, err, "%s: postgres", what)
	}
	return errs.Wrap(codes.Unavailable, err, "%s: postgres unavailable", what)
}
