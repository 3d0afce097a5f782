package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// A call that ends at the SDK's own deadline, or is cancelled, says
// whether it may have run: after it was sent it may have; while no gateway
// was reachable it was not sent and did not run.
func TestCallErrorsSayWhetherItRan(t *testing.T) {
	s := start(t)
	c := dial(t, []string{s.addr}, client.WithTimeout(20*time.Millisecond))
	_, err := c.Ask(t.Context(), "Slow:x", nil)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "it may have run") {
		t.Fatalf("slow Ask at the SDK's deadline: %v, want DeadlineExceeded saying it may have run", err)
	}
	<-s.started
	<-s.cancelled

	p := newProxy(t, s.addr)
	c2 := dial(t, []string{p.addr()})
	if _, err := c2.Ask(t.Context(), "Echo:x", nil); err != nil {
		t.Fatal(err)
	}
	p.refusing.Store(true)
	p.cut()
	testutil.WaitFor(t, "a refused re-attach", func() bool { return p.refused.Load() >= 1 })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c2.Ask(ctx, "Echo:x", nil)
		errc <- err
	}()
	n := p.refused.Load()
	testutil.WaitFor(t, "another refused re-attach", func() bool { return p.refused.Load() >= n+1 })
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled || !strings.Contains(err.Error(), "did not run") {
		t.Fatalf("call cancelled while no gateway was reachable: %v, want Canceled saying it did not run", err)
	}
	p.refusing.Store(false)
}
