package cluster

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/internal/membership"
)

// transportGoroutines counts the goroutines of this process's silo-to-silo
// transports that serve one stream (a peer's sender and reader, an inbound
// stream's writer, reader and lanes), leaving out the request workers,
// which park between requests.
func transportGoroutines() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "agentsilo/internal/transport.") && !strings.Contains(g, "(*workers).work") {
			n++
		}
	}
	return n
}

// peersOutsideView lists the peers s's transport keeps (a stream, or
// redials) that are not members of its view.
func peersOutsideView(s *Silo) []string {
	v := s.router.state.Load().view
	var out []string
	for _, addr := range s.tp.Peers() {
		if !slices.ContainsFunc(v.Members, func(m membership.Member) bool { return m.PeerAddr == addr }) {
			out = append(out, addr)
		}
	}
	return out
}

// Silos join and leave, a few at a time: once each has left, the silos that
// stay hold no stream to it and do not redial it, and the transports'
// goroutines are back to what they were before the first joined.
func TestDepartedPeersClosed(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	stay := []*Silo{c.start("s0"), c.start("s1")}
	c.waitView("s0", "s1")
	// Each silo tells the other it swept the view, which opens the streams
	// both ways.
	streams := func(s *Silo, n int) func() bool {
		return func() bool { return len(s.tp.Peers()) == n && len(peersOutsideView(s)) == 0 }
	}
	for _, s := range stay {
		waitFor(t, s.cfg.Name+" streams to the view", streams(s, 1))
	}
	// An Ask each way, answered, so that both streams are up before the
	// goroutines are counted.
	askOther := func() {
		t.Helper()
		for i, from := range stay {
			other := stay[1-i].cfg.Name
			to := ""
			for j := 0; to == ""; j++ {
				if a := fmt.Sprintf("Probe:test:a%d", j); Owner(a, []string{"s0", "s1"}) == other {
					to = a
				}
			}
			if got, err := ask(t.Context(), from, to); err != nil || got != other {
				t.Fatalf("ask %s from %s: %q, %v", to, from.cfg.Name, got, err)
			}
		}
	}
	askOther()
	// The reminder buckets each took from the other at its start are
	// loaded: no fetch is in flight when the goroutines are counted.
	for _, s := range stay {
		if err := s.reminders.Settled(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	baseline := transportGoroutines()
	const rounds, perRound = 10, 5 // 50 joins and leaves
	for round := range rounds {
		names := []string{"s0", "s1"}
		for i := range perRound {
			name := fmt.Sprintf("j%d-%d", round, i)
			c.start(name)
			names = append(names, name)
		}
		slices.Sort(names)
		c.waitView(names...)
		for _, s := range stay {
			waitFor(t, s.cfg.Name+" streams to the joiners", streams(s, len(names)-1))
		}
		for _, n := range names {
			if n != "s0" && n != "s1" {
				c.stop(n)
			}
		}
		c.waitView("s0", "s1")
	}
	for _, s := range stay {
		waitFor(t, s.cfg.Name+" closes the departed silos' streams", streams(s, 1))
	}
	// The silos that stay still talk to each other.
	askOther()
	waitFor(t, fmt.Sprintf("transport goroutines back to %d", baseline), func() bool {
		return transportGoroutines() == baseline
	})
	c.l.check(t)
}
