package auditstore

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
)

// pgOpTimeout bounds each PostgreSQL transaction.
const pgOpTimeout = 10 * time.Second

// Postgres is the store in PostgreSQL, in two tables:
//
//	agentsilo_audit(partition text, seq bigint, key text unique, at timestamptz, data jsonb, primary key (partition, seq))
//	agentsilo_audit_head(partition text primary key, data jsonb)
//
// An append is one transaction: it locks the partition's head row (SELECT
// ... FOR UPDATE, after an INSERT ... ON CONFLICT DO NOTHING makes it),
// inserts each record with ON CONFLICT (key) DO NOTHING (a record whose
// key is there is not written, and takes no sequence number), and updates
// the head.
type Postgres struct {
	pool *pgxpool.Pool
	own  bool
	once sync.Once
}

// OpenPostgres connects a pool of its own to the database at url and
// returns the store, creating its tables if missing; Close closes the
// pool.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "audit store: bad PostgreSQL URL")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "audit store: PostgreSQL pool")
	}
	s, err := NewPostgres(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// NewPostgres returns the store on pool, creating its tables if missing.
// Close leaves pool open.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool) (*Postgres, error) {
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	err := pgx.BeginFunc(octx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(octx, `SELECT pg_advisory_xact_lock(hashtext('agentsilo/audit'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(octx, `CREATE TABLE IF NOT EXISTS agentsilo_audit (partition text NOT NULL, seq bigint NOT NULL, key text NOT NULL UNIQUE, at timestamptz NOT NULL, data jsonb NOT NULL, PRIMARY KEY (partition, seq))`); err != nil {
			return err
		}
		_, err := tx.Exec(octx, `CREATE TABLE IF NOT EXISTS agentsilo_audit_head (partition text PRIMARY KEY, data jsonb NOT NULL)`)
		return err
	})
	if err != nil {
		return nil, pgFail(ctx, "audit store: create the tables", err)
	}
	return &Postgres{pool: pool}, nil
}

// Append implements Store.
func (s *Postgres) Append(ctx context.Context, p string, recs []audit.Record) ([]audit.Record, error) {
	var out []audit.Record
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	err := pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error {
		out = nil
		h, err := lockHead(octx, tx, p)
		if err != nil {
			return err
		}
		for _, r := range recs {
			one := []audit.Record{r}
			audit.Link(h, one)
			r = one[0]
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			tag, err := tx.Exec(octx, `INSERT INTO agentsilo_audit (partition, seq, key, at, data) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING`, p, int64(r.Seq), r.Key, r.Time, data)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue // recorded already
			}
			h.Seq, h.Hash = r.Seq, r.Hash
			out = append(out, r)
		}
		return putHead(octx, tx, h)
	})
	if err != nil {
		return nil, pgFail(ctx, "audit: append to partition "+p+" (may have run)", err)
	}
	return out, nil
}

// lockHead returns partition p's head, locking its row to the end of tx.
func lockHead(ctx context.Context, tx pgx.Tx, p string) (audit.Head, error) {
	empty, _ := json.Marshal(audit.Head{Partition: p})
	if _, err := tx.Exec(ctx, `INSERT INTO agentsilo_audit_head (partition, data) VALUES ($1, $2) ON CONFLICT (partition) DO NOTHING`, p, empty); err != nil {
		return audit.Head{}, err
	}
	var data []byte
	if err := tx.QueryRow(ctx, `SELECT data FROM agentsilo_audit_head WHERE partition = $1 FOR UPDATE`, p).Scan(&data); err != nil {
		return audit.Head{}, err
	}
	var h audit.Head
	if err := json.Unmarshal(data, &h); err != nil {
		return audit.Head{}, errs.Wrap(codes.DataLoss, err, "audit: the head of partition %s is not JSON", p)
	}
	return h, nil
}

func putHead(ctx context.Context, tx pgx.Tx, h audit.Head) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE agentsilo_audit_head SET data = $2 WHERE partition = $1`, h.Partition, data)
	return err
}

// Heads implements Store.
func (s *Postgres) Heads(ctx context.Context) ([]audit.Head, error) {
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	rows, err := s.pool.Query(octx, `SELECT data FROM agentsilo_audit_head ORDER BY partition`)
	if err != nil {
		return nil, pgFail(ctx, "audit: read the heads", err)
	}
	defer rows.Close()
	var out []audit.Head
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, pgFail(ctx, "audit: read the heads", err)
		}
		var h audit.Head
		if err := json.Unmarshal(data, &h); err != nil {
			return nil, errs.Wrap(codes.DataLoss, err, "audit: a head is not JSON")
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, pgFail(ctx, "audit: read the heads", err)
	}
	return out, nil
}

// Scan implements Store.
func (s *Postgres) Scan(ctx context.Context, p string, after uint64, limit int) ([]audit.Record, error) {
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	rows, err := s.pool.Query(octx, `SELECT seq, data FROM agentsilo_audit WHERE partition = $1 AND seq > $2 ORDER BY seq LIMIT $3`, p, int64(after), limit)
	if err != nil {
		return nil, pgFail(ctx, "audit: read partition "+p, err)
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		var (
			seq  int64
			data []byte
		)
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, pgFail(ctx, "audit: read partition "+p, err)
		}
		var r audit.Record
		if err := json.Unmarshal(data, &r); err != nil {
			r = audit.Record{Partition: p, Seq: uint64(seq), Detail: "undecodable: " + clip(err.Error(), 200)}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, pgFail(ctx, "audit: read partition "+p, err)
	}
	return out, nil
}

// Sweep implements Store.
func (s *Postgres) Sweep(ctx context.Context, p string, before time.Time, max int) (int, error) {
	n := 0
	octx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	err := pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error {
		n = 0
		h, err := lockHead(octx, tx, p)
		if err != nil {
			return err
		}
		rows, err := tx.Query(octx, `SELECT seq, at, data->>'hash' FROM agentsilo_audit WHERE partition = $1 ORDER BY seq LIMIT $2`, p, max)
		if err != nil {
			return err
		}
		var last struct {
			seq  int64
			hash string
		}
		for rows.Next() {
			var (
				seq  int64
				at   time.Time
				hash string
			)
			if err := rows.Scan(&seq, &at, &hash); err != nil {
				rows.Close()
				return err
			}
			if !at.Before(before) {
				break
			}
			last.seq, last.hash = seq, hash
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if _, err := tx.Exec(octx, `DELETE FROM agentsilo_audit WHERE partition = $1 AND seq <= $2`, p, last.seq); err != nil {
			return err
		}
		h.AnchorSeq, h.AnchorHash = uint64(last.seq), last.hash
		return putHead(octx, tx, h)
	})
	if err != nil {
		return 0, pgFail(ctx, "audit: sweep partition "+p, err)
	}
	return n, nil
}

// Close implements Store: it closes the pool if OpenPostgres opened it.
func (s *Postgres) Close() error {
	if s.own {
		s.once.Do(s.pool.Close)
	}
	return nil
}

// pgFail maps a PostgreSQL failure to its code: the caller's own end
// first, then the server's SQLSTATE classes, and a database that cannot be
// reached Unavailable.
func pgFail(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		code := codes.DeadlineExceeded
		if errors.Is(cerr, context.Canceled) {
			code = codes.Canceled
		}
		return errs.Wrap(code, cerr, "%s", what)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code := codes.Internal
		switch c := pe.Code; {
		case c[:2] == "53", c == "54000":
			code = codes.ResourceExhausted
		case c[:2] == "08", c[:2] == "40", len(c) >= 3 && c[:3] == "57P":
			code = codes.Unavailable
		case c[:2] == "22":
			code = codes.InvalidArgument
		}
		return errs.Wrap(code, err, "%s: postgres", what)
	}
	if e := errs.Code(err); e == codes.DataLoss {
		return err
	}
	return errs.Wrap(codes.Unavailable, err, "%s: postgres unavailable", what)
}
