//go:build !race

package cluster

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
)

// maxCrossSiloAllocs bounds the allocations of one Ask from a silo's
// runtime to an agent another silo hosts, both silos counted (they share
// this process): the caller's message and its ids, the routing, the
// transport's envelopes and gRPC's frames and buffers on both sides, the
// decoded request and reply, the call's context, the grain's envelope and
// turn, and the handler's reply. It was 48 before the changes of
// 2026-11-26 (see cluster/transport/allocs_test.go; a request's envelope and
// turn in one; the deadline's timer of an inbound call kept for the next
// call); 31 since, and the bound is what that reached. The race detector
// allocates on its own, so this runs without it (.ci/run runs it so).
const maxCrossSiloAllocs = 31

type allocEcho struct{}

func (allocEcho) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	return m.Response(), nil
}

func TestCrossSiloAskAllocs(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	configure := func(_ *SiloConfig, reg *grain.Registry) {
		if err := reg.Register("AllocEcho", func(grain.Host) (grain.Agent, error) { return allocEcho{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	s1 := c.startWith("s1", configure)
	c.startWith("s2", configure)
	c.waitView("s1", "s2")
	to := ""
	for i := 0; to == ""; i++ {
		if a := fmt.Sprintf("AllocEcho:test:a%d", i); Owner(a, []string{"s1", "s2"}) == "s2" {
			to = a
		}
	}
	rt := s1.Runtime()
	ctx := context.Background()
	ask := func() {
		if _, err := rt.Ask(ctx, &grain.Message{To: to, From: "Client:test:x", Message: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	ask() // activates it on s2
	if rt.Len() != 0 {
		t.Fatalf("%s is hosted on s1", to)
	}
	// The count takes in every goroutine of the process: work the silos do
	// on their own right after they start (the reminder service loading
	// its buckets, etcd answering it) only adds to it, for a while. The
	// least of a few runs is the Ask's own.
	n := testing.AllocsPerRun(2000, ask)
	for range 3 {
		n = min(n, testing.AllocsPerRun(2000, ask))
	}
	if n > maxCrossSiloAllocs {
		t.Fatalf("a cross-silo Ask allocates %.1f times, want at most %d", n, maxCrossSiloAllocs)
	}
	t.Logf("a cross-silo Ask allocates %.1f times (both silos)", n)
}
