package state

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Open picks the store from the --state-store value.
func TestOpen(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	for _, spec := range []string{"", "etcd"} {
		st, err := Open(t.Context(), spec, cli, "/open")
		if err != nil {
			t.Fatalf("Open(%q) = %v", spec, err)
		}
		if e, ok := st.(*Etcd); !ok || e.root != "/open/state/" {
			t.Fatalf("Open(%q) = %#v, want the etcd store under /open/state/", spec, st)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Open(t.Context(), "etcd", nil, "")
	wantCode(t, err, codes.InvalidArgument)

	for spec, want := range map[string]string{
		"mysql://u@h/db":                      `"mysql"`,
		"file:/tmp/x":                         `"file:/tmp/x"`,
		"postgres://u:secret@h:notaport/db":   "bad PostgreSQL URL",
		"postgresql://u:secret@[::1/db":       "bad PostgreSQL URL",
		"postgres://u@h/db?pool_max_conns=no": "bad PostgreSQL URL",
	} {
		_, err := Open(t.Context(), spec, cli, "")
		wantCode(t, err, codes.InvalidArgument)
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Fatalf("Open(%q) = %q, want it to mention %s and not the password", spec, err, want)
		}
	}

	// Nothing listens: Unavailable, within the caller's time.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = Open(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5", cli, "")
	wantCode(t, err, codes.Unavailable)

}
