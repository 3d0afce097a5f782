// Package testutil holds what tests across the module share: free loopback
// addresses, waiting on a named condition, a logger that is quiet unless
// AGENTSILO_TEST_LOG is set, and goleak's options for tests that start
// silos.
package testutil

import (
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// WaitTimeout bounds every wait on a condition: generous, so that a slow
// machine does not fail the tests; conditions are awaited, never timed.
const WaitTimeout = 45 * time.Second

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. Another process may take the port before the test listens on it, so
// use port 0 where the code under test allows it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitFor polls cond until it holds, failing the test after WaitTimeout
// with what it waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		<-tick.C
	}
}

// Logger is a logger that discards, or writes debug logs to stderr when
// AGENTSILO_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("AGENTSILO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// LeakOptions are goleak's options for tests that start silos, ignoring
// the goroutines running now. memberlist's Shutdown does not wait for a
// probe in flight: that goroutine ends by itself within a probe interval,
// so it is not a leak.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func1"),
	}
}
