package state

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
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
type Postgres struct {
	pool  *pgxpool.Pool
	own   bool // Close closes pool
	table string

	load, insert, update, del, exists, version string
}

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
	s := &Postgres{
		pool:    pool,
		table:   table,
		load:    `SELECT data, version FROM ` + t + ` WHERE address = $1`,
		insert:  `INSERT INTO ` + t + ` (address, data, version) VALUES ($1, $2, nextval('` + seq + `')) ON CONFLICT (address) DO NOTHING RETURNING version`,
		update:  `UPDATE ` + t + ` SET data = $2, version = nextval('` + seq + `') WHERE address = $1 AND version = $3 RETURNING version`,
		del:     `DELETE FROM ` + t + ` WHERE address = $1 AND version = $2`,
		exists:  `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE address = $1)`,
		version: `SELECT COALESCE((SELECT version FROM ` + t + ` WHERE address = $1), 0)`,
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
		_, err := tx.Exec(octx, `CREATE TABLE IF NOT EXISTS `+t+` (address text PRIMARY KEY, data bytea NOT NULL, version bigint NOT NULL)`)
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
		return "", pgFail(ctx, what, err)
	}
	return strconv.FormatInt(next, 10), nil
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
		return pgFail(ctx, what, err)
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
