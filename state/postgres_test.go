package state

import (
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/pgtest"
)

// newPool connects to url for the rest of the test.
func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestPostgres(t *testing.T) {
	url := pgtest.Start(t)

	t.Run("conformance", func(t *testing.T) {
		s, err := OpenPostgres(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conformance(t, s)
		t.Run("etag errors", func(t *testing.T) { etagErrors(t, s) })
	})

	t.Run("keyed", func(t *testing.T) {
		s, err := OpenPostgres(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		keyedConformance(t, s)
		exactlyOnce(t, s)
	})

	t.Run("open", func(t *testing.T) {
		st, err := Open(t.Context(), strings.Replace(url, "postgres://", "postgresql://", 1), nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := st.(*Postgres); !ok || p.Table() != DefaultTable || !p.own {
			t.Fatalf("Open(postgresql://...) = %#v", st)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})

	// Silos starting together create the table once; a state larger than
	// etcd's limit is kept; the etag is the row's version.
	t.Run("layout", func(t *testing.T) {
		pool := newPool(t, url)
		stores := make([]*Postgres, 4)
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		for i := range stores {
			wg.Go(func() { stores[i], errs[i] = NewPostgres(t.Context(), pool, "layout_state") })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("NewPostgres = %v", err)
			}
		}
		s := stores[0]
		addr := grain.Address{Type: "Big", Owner: "o", Alias: "a"}
		etag, err := s.Save(t.Context(), addr, large(3*MaxEtcdState), "")
		if err != nil {
			t.Fatalf("Save of 3 MiB = %v", err)
		}
		var version int64
		var n int
		err = pool.QueryRow(t.Context(), `SELECT version, length(data) FROM layout_state WHERE address = $1`, "Big:o:a").Scan(&version, &n)
		if err != nil || itoa(version) != etag || n != 3*MaxEtcdState {
			t.Fatalf("row: version %d, %d bytes, %v; Save gave etag %q", version, n, err, etag)
		}
		if data, cur, err := stores[3].Load(t.Context(), addr); err != nil || len(data) != 3*MaxEtcdState || cur != etag {
			t.Fatalf("Load through another store: %d bytes at %q, %v", len(data), cur, err)
		}
		if _, err := NewPostgres(t.Context(), pool, "Bad-Name"); err == nil {
			t.Fatal("NewPostgres accepted table Bad-Name")
		}
	})
}
