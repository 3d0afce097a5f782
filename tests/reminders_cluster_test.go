package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestReminderSurvivesKillInCluster: a reminder registered in a three-silo
// cluster fires on the silo that owns its agent; after kill -9 of that silo
// a survivor takes the reminder over with the agent, and it goes on firing
// there. Ticker's "count" answers the ticks its current activation
// received, so a count of at least one from a survivor is a tick fired after
// the takeover.
func TestReminderSurvivesKillInCluster(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: []string{"--min-reminder-period", "1s"}})
	const addr = "Ticker:test:survivor"
	owner := c.Owner(addr)
	ownerIdx := -1
	for i := range c.Len() {
		if c.Silo(i).Name == owner {
			ownerIdx = i
		}
	}
	via := (ownerIdx + 1) % c.Len()
	cl := c.Client(t, via)
	ask := func(text string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		r, err := cl.Ask(ctx, addr, &client.Message{Message: text})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	}
	if _, err := ask("start 1s"); err != nil {
		t.Fatal(err)
	}
	ticked := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if s, err := ask("count"); err == nil {
				if n, _ := strconv.Atoi(s); n >= 1 {
					return
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no tick %s", what)
			case <-tick.C:
			}
		}
	}
	ticked("on the owner " + owner)

	c.Kill(ownerIdx)
	c.WaitGone(owner)
	if c.Owner(addr) == owner {
		t.Fatalf("%s still owned by the dead %s", addr, owner)
	}
	ticked("on a survivor after the owner was killed")
	agents, err := cl.Agents().List(t.Context(), "", "Ticker")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		if a.Address == addr && a.Silo == owner {
			t.Fatalf("%s listed on the dead silo %s", addr, owner)
		}
	}
	if _, err := ask("stop"); err != nil {
		t.Fatal(err)
	}
}
