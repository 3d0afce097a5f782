package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// startFails runs the silo with args, which name a store that cannot be
// reached, and checks that it exits 1 with one error line naming cause,
// after nothing but informational lines, and no panic.
func startFails(t *testing.T, cause string, args ...string) {
	t.Helper()
	defer goleak.VerifyNone(t, testutil.LeakOptions()...)
	args = append([]string{
		"--name", "s1",
		"--gateway-addr", "127.0.0.1:0", "--http-addr", "",
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--embedded-etcd-addr", testutil.FreeAddrPair(t), // it listens on the port and the next
	}, args...)
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	log := stderr.String()
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, log)
	}
	var errLines []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
			errLines = append(errLines, line)
		}
	}
	if len(errLines) != 1 || !strings.Contains(errLines[0], cause) || strings.Contains(log, "panic") {
		t.Fatalf("want one error line naming %q; stderr:\n%s", cause, log)
	}
}

// An external etcd that refuses connections: one line that says so, exit 1.
func TestStartWithoutEtcd(t *testing.T) {
	startFails(t, "connection refused", "--etcd-endpoints", testutil.FreeAddr(t))
}

// A PostgreSQL state store that refuses connections: one line that says so,
// exit 1.
func TestStartWithoutPostgres(t *testing.T) {
	startFails(t, "connection refused", "--state-store", "postgres://agentsilo@"+testutil.FreeAddr(t)+"/agentsilo?connect_timeout=5")
}

// A NATS JetStream topic store that refuses connections: one line that
// names it and the cause, exit 1. (The NATS client itself reports "no
// servers available for connection", not the refusal.)
func TestStartWithoutNATS(t *testing.T) {
	addr := testutil.FreeAddr(t)
	startFails(t, "topics: connect to NATS at nats://"+addr+": "+nats.ErrNoServers.Error()+" (dial tcp "+addr+": connect: connection refused)", "--topic-store", "nats://"+addr)
}
