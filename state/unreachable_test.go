package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/pgtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// A store that cannot be reached fails each call with Unavailable (a caller
// may try again), never Internal, and within the caller's deadline.
func TestUnreachableStoreIsUnavailable(t *testing.T) {
	addr := grain.Address{Type: "Notes", Owner: "alice", Alias: "n1"}
	calls := func(t *testing.T, s Store) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, _, err := s.Load(ctx, addr)
		wantCode(t, err, codes.Unavailable)
		_, err = s.Save(ctx, addr, []byte("x"), "")
		wantCode(t, err, codes.Unavailable)
		err = s.Delete(ctx, addr, "1")
		wantCode(t, err, codes.Unavailable)
		t.Logf("a delete from an unreachable store: %v", err)
	}
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		s := NewEtcd(srv.Client(t), "/away")
		if _, err := s.Save(t.Context(), addr, []byte("kept"), ""); err != nil {
			t.Fatal(err)
		}
		srv.Stop()
		calls(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := OpenPostgres(t.Context(), pgtest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The same store, its pool now pointed at a port nobody listens on.
		s.pool.Close()
		s.pool = newPool(t, fmt.Sprintf("postgres://nobody@%s/nothing?connect_timeout=2", testutil.FreeAddr(t)))
		calls(t, s)
	})
}
