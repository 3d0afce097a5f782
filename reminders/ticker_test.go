package reminders

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// The demo Ticker on a runtime wired as a silo wires it: its reminder is
// stored in etcd and its ticks reach it through the runtime, activating it
// again after it was deactivated.
func TestTickerOnRuntime(t *testing.T) {
	h := newHarness(t)
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	delivered := make(chan error, 10)
	cfg := h.config()
	cfg.MinPeriod = time.Minute
	cfg.Known = func(typ string) bool { _, ok := reg.Lookup(typ); return ok }
	cfg.Deliver = nil // the runtime does not exist yet: Start below
	svc := h.start(cfg)
	gcfg := grain.DefaultConfig()
	gcfg.Reminders = svc
	siloapi.Wire(&gcfg, siloapi.Wiring{Clock: h.clk}) // the host sets Due from its clock
	rt, err := grain.New(gcfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(func(ctx context.Context, m *grain.Message) error {
		err := rt.Send(ctx, m)
		delivered <- err
		return err
	})
	defer func() {
		svc.Close() // no deliveries into a closing runtime
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	ask := func(text string) (string, error) {
		r, err := rt.Ask(h.ctx, &grain.Message{From: "Session:alice:s1", To: "Ticker:alice:t", Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}
	if _, err := ask("start 30s"); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("start 30s = %v, want InvalidArgument", err)
	}
	if _, err := ask("start 1m"); err != nil {
		t.Fatal(err)
	}
	list, err := svc.List(h.ctx, grain.Address{Type: "Ticker", Owner: "alice", Alias: "t"})
	if err != nil || len(list) != 1 || list[0].Name != "tick" || list[0].MessageType != demoagents.TickType {
		t.Fatalf("List = %+v, %v", list, err)
	}
	h.loaded(svc)
	h.clk.Advance(time.Minute + time.Second)
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	if got, err := ask("count"); err != nil || got != "1" {
		t.Fatalf("count = %q, %v; want 1", got, err)
	}
	// Registered again, due at once: a tick without the clock moving.
	if got, err := ask("start 1m 0s"); err != nil || got != `reminder "tick" every 1m0s, first in 0s` {
		t.Fatalf("start 1m 0s = %q, %v", got, err)
	}
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	if got, err := ask("count"); err != nil || got != "2" {
		t.Fatalf("count = %q, %v; want 2", got, err)
	}
	if _, err := ask("stop"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Hour)
	if err := svc.flush(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := svc.Stats().Fired; n != 2 {
		t.Fatalf("fired %d ticks after stop, want 2 in all", n)
	}
}
