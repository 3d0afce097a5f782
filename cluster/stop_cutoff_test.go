package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"

	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestStopCutOffFromEtcd: a silo whose etcd went away (suspended) says what
// it knows of a member whose port refuses it (that etcd does not answer,
// not that the member's lease is renewed), and stops gracefully within its
// shutdown timeout, without an error: what needs etcd (marking its record
// leaving, revoking its lease) is given up, and logged, once etcd is known
// to be unreachable, instead of holding the stop until the timeout and
// failing it.
func TestStopCutOffFromEtcd(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	link := newLink(t, c.etcd.Addr())
	defer link.close()
	defer c.close()
	const timeout = 20 * time.Second
	var log testutil.SyncBuffer
	s1 := c.startWith("s1", func(cfg *SiloConfig, _ *grain.Registry) {
		cfg.Etcd = etcdstore.Config{Endpoints: []string{link.addr()}, Prefix: "/t"}
		cfg.ShutdownTimeout = timeout
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	c.start("s2")
	c.waitView("s1", "s2")
	if _, err := ask(t.Context(), s1, "Probe:test:a"); err != nil {
		t.Fatal(err)
	}
	link.cut()
	waitFor(t, "s1 to be suspended", func() bool { return !s1.members.Health().SuspendedAt.IsZero() })
	// s2 goes away: its peer port refuses s1, which cannot ask etcd whether
	// s2's lease lives, and says so.
	c.stop("s2")
	waitFor(t, "s1 to log that etcd does not answer about s2", func() bool {
		return strings.Contains(log.String(), "etcd does not answer: whether its lease is still renewed is unknown")
	})
	if strings.Contains(log.String(), "its lease is still renewed: no proof") {
		t.Errorf("s1 said s2's lease is renewed, not knowing:\n%s", log.String())
	}
	c.mu.Lock()
	delete(c.silos, "s1")
	c.mu.Unlock()
	start := time.Now()
	err := s1.Close(context.Background())
	t.Logf("Close took %v: %v", time.Since(start), err)
	if err != nil {
		t.Fatalf("Close of a silo cut off from etcd: %v", err)
	}
}
