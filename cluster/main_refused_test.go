package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// A silo program fenced after its security files changed does not retry
// forever a start the cluster refuses: the refusal (its gossip key no
// longer matches the older member's) cannot heal by trying again, so the
// program exits 1 with one line saying why.
func TestProgramExitsWhenRefusedAfterFence(t *testing.T) {
	opts := leakOptions()
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) }) // after the etcd client's cleanup
	c := newTestCluster(t)
	defer c.close()
	dir := t.TempDir()
	const key1, key2 = "AAECAwQFBgcICQoLDA0ODw==\n", "DwAODQwLCgkIBwYFBAMCAQ==\n"
	older, mine := filepath.Join(dir, "older.key"), filepath.Join(dir, "mine.key")
	for _, f := range []string{older, mine} {
		if err := os.WriteFile(f, []byte(key1), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.startWith("b", func(cfg *SiloConfig, _ *grain.Registry) { cfg.GossipKeyFile = older })

	var stderr testutil.SyncBuffer
	code := make(chan int, 1)
	p := Program{Registry: newTestRegistry(t)}
	go func() {
		code <- p.Run([]string{"--name", "a", "--gateway-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0",
			"--gossip-addr", "127.0.0.1:0", "--http-addr", "", "--etcd-endpoints", c.etcd.Endpoint(), "--etcd-prefix", "/t",
			"--gossip-key-file", mine}, &stderr, &stderr)
	}()
	waitFor(t, "silo a serving", func() bool { return strings.Contains(stderr.String(), "silo serving") })

	// a's key file changes, and a is fenced (its record deleted): its next
	// start is refused by b, the older member.
	if err := os.WriteFile(mine, []byte(key2), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := c.etcd.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, "/t", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), "members/a") {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case got := <-code:
		if got != 1 {
			t.Errorf("exit code %d, want 1", got)
		}
	case <-time.After(waitTimeout):
		// Stop it as an operator would (Run catches SIGTERM).
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-code
		t.Fatalf("the program still ran after a refused start; its log:\n%s", stderr.String())
	}
	log := stderr.String()
	if n := strings.Count(log, "silo failed to start"); n != 1 || !strings.Contains(log, "do not match the cluster's") {
		t.Errorf("%d lines saying the start failed, want 1 saying the settings do not match; log:\n%s", n, log)
	}
	if strings.Contains(log, "retrying") {
		t.Errorf("the program retried a refused start; log:\n%s", log)
	}
}
