package pgtest

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A server starts, answers queries, and stops at cleanup.
func TestStart(t *testing.T) {
	url := Start(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT 1 + 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("SELECT 1 + 1 = %d, %v", n, err)
	}
}

// Without the binaries, the error says how to install them.
func TestNoBinaries(t *testing.T) {
	old := debianBins
	debianBins = t.TempDir() + "/*/bin"
	defer func() { debianBins = old }()
	t.Setenv("PATH", t.TempDir())
	_, err := BinDir()
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y --no-install-recommends postgresql") {
		t.Fatalf("BinDir without binaries = %v", err)
	}
	if _, err := Run(t.Context(), Config{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "install PostgreSQL") {
		t.Fatalf("Run without binaries = %v", err)
	}
}
