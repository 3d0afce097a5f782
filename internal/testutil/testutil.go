// Package testutil holds what tests across the module share: free loopback
// addresses (and pairs of ports for an embedded etcd), a buffer safe to
// write while it is read, waiting on a named condition, a logger that is quiet unless
// AGENTSILO_TEST_LOG is set, and goleak's options for tests that start
// silos.
package testutil

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
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

// WaitContext returns t.Context() bounded by WaitTimeout from now, for a
// wait on a condition that takes a context (a select on its Done, a
// WaitX(ctx) call): t.Context() alone ends only when the test does, so a
// wait on it alone never gives up, and a hung test is killed by go test's
// -timeout with every test's stack instead of failing with what it waited
// for. It is cancelled when the test ends.
func WaitContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), WaitTimeout)
	t.Cleanup(cancel)
	return ctx
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

// FreeAddrPair returns a 127.0.0.1 address whose port P and P+1 were both
// free a moment ago: an embedded etcd serves clients on P and its peers on
// P+1.
func FreeAddrPair(t testing.TB) string {
	t.Helper()
	for range 50 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		l1.Close()
		if err == nil {
			l2.Close()
			return "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatal("no two consecutive free ports")
	return ""
}

// SyncBuffer is a bytes.Buffer that a logger or a process writes while a
// test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
