package etcdstore

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// The compactor compacts, at each interval, up to the revision it noted one
// interval before: a revision written before the first tick is readable
// until the second tick and compacted after it.
func TestCompactor(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	clk := clock.NewFake(time.Unix(1e9, 0))
	cfg := testEtcdConfig(t, t.TempDir())
	cfg.CompactInterval, cfg.clk = time.Minute, clk
	e := startEtcd(t, cfg)
	defer e.Close()
	ctx := t.Context()
	cli := e.Client()
	r1, err := cli.Put(ctx, e.Prefix()+"k", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, e.Prefix()+"k", "2"); err != nil {
		t.Fatal(err)
	}
	old := r1.Header.Revision
	readOld := func() error {
		_, err := cli.Get(ctx, e.Prefix()+"k", clientv3.WithRev(old))
		return err
	}
	timerSet := func() bool { n, _ := clk.Waiting(); return n == 1 }
	testutil.WaitFor(t, "the compactor's timer", timerSet)
	clk.Advance(time.Minute) // notes the revision: nothing compacted yet
	testutil.WaitFor(t, "the compactor's next timer", timerSet)
	if err := readOld(); err != nil {
		t.Fatalf("revision %d after the first interval: %v", old, err)
	}
	clk.Advance(time.Minute) // compacts up to what it noted
	testutil.WaitFor(t, "the compaction", func() bool { return errors.Is(readOld(), rpctypes.ErrCompacted) })
	if r, err := cli.Get(ctx, e.Prefix()+"k"); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("the key after compaction: %v %v", r, err)
	}
	// A compaction to a revision compacted already is no error.
	if _, err := e.CompactOnce(ctx, old); err != nil {
		t.Fatal(err)
	}
}

func TestCompactIntervalValidation(t *testing.T) {
	cfg := testEtcdConfig(t, t.TempDir())
	cfg.CompactInterval = -time.Second
	if _, err := Start(t.Context(), cfg); err == nil {
		t.Fatal("a negative compact interval was accepted")
	}
}
