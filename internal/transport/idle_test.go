package transport

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// inboundGoroutines counts the goroutines serving inbound streams (each
// stream's writer, reader and lanes).
func inboundGoroutines() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "transport.(*inbound).") || strings.Contains(g, "transport.server.Stream") {
			n++
		}
	}
	return n
}

// Peers that sent requests and one-way messages to receivers on every lane
// and then went quiet cost the silo they talk to two goroutines each (the
// stream's writer and reader): the lanes' goroutines end once they have
// handed everything on, and start again with the next message.
func TestIdlePeerGoroutines(t *testing.T) {
	checkLeaks(t)
	hub := startSilo(t, "hub", "127.0.0.1:0", nil, nil, nil)
	const peers = 6
	var senders []*testSilo
	for i := range peers {
		senders = append(senders, startSilo(t, fmt.Sprintf("p%d", i), fmt.Sprintf("127.0.0.%d:0", i+2), nil, nil, nil))
	}
	ctx := context.Background()
	// Receivers on every lane.
	var to []string
	seen := map[int]bool{}
	for i := 0; len(seen) < numLanes; i++ {
		a := fmt.Sprintf("Echo:acme:r%d", i)
		if !seen[lane(a)] {
			seen[lane(a)] = true
			to = append(to, a)
		}
	}
	send := func() {
		t.Helper()
		for _, s := range senders {
			for _, a := range to {
				env := &Envelope{Message: &agentsilov1.AgentMessage{To: a, From: "Caller:acme:y", Message: "hi"}}
				if _, err := s.tr.Ask(ctx, hub.addr, env); err != nil {
					t.Fatal(err)
				}
				one := &Envelope{Kind: agentsilov1.Kind_KIND_ONE_WAY, Message: &agentsilov1.AgentMessage{To: a, From: "Caller:acme:y"}}
				if err := s.tr.Send(ctx, hub.addr, one); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	send()
	const perPeer = 2
	testutil.WaitFor(t, fmt.Sprintf("at most %d inbound goroutines per idle peer", perPeer), func() bool {
		return inboundGoroutines() <= perPeer*peers
	})
	// The lanes start again for the next messages, and end again.
	send()
	testutil.WaitFor(t, fmt.Sprintf("at most %d inbound goroutines per idle peer, again", perPeer), func() bool {
		return inboundGoroutines() <= perPeer*peers
	})
}

// peerGoroutines counts the goroutines of the peer transports and of gRPC
// (streams, connections, their readers and writers), leaving out the
// parked workers that run inbound requests: those are the transport's,
// not any peer's.
func peerGoroutines() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "(*workers).work") {
			continue
		}
		if strings.Contains(g, "google.golang.org/grpc") || strings.Contains(g, "internal/transport.") {
			n++
		}
	}
	return n
}

// idleAll asks every peer's sender of tr to close its stream if it is idle,
// as IdleTimeout passing without traffic would, and reports whether every
// peer is closed for idleness.
func idleAll(tr *Transport) bool {
	all := true
	for _, addr := range tr.Peers() {
		tr.mu.RLock()
		p := tr.peers[addr]
		tr.mu.RUnlock()
		if p == nil {
			continue
		}
		p.mu.Lock()
		idle := p.state == stateIdle
		p.mu.Unlock()
		if !idle {
			all = false
			select {
			case p.idleNow <- struct{}{}:
			default:
			}
		}
	}
	return all
}

// A peer that has gone quiet costs each silo one goroutine (its stream's
// sender, waiting for the next envelope) and a few KB once its stream and
// connection are closed for idleness: no gRPC connection, stream, reader
// or lane is left on either side. The next Ask opens it again.
func TestIdlePeerCost(t *testing.T) {
	checkLeaks(t)
	const n = 4
	var downs atomic.Int64
	var silos []*testSilo
	for i := range n {
		silos = append(silos, startSilo(t, fmt.Sprintf("s%d", i), fmt.Sprintf("127.0.0.%d:0", i+1), nil, func(c *Config) {
			c.OnPeerState = func(_ string, up bool) {
				if !up {
					downs.Add(1)
				}
			}
		}, nil))
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	g0, h0 := peerGoroutines(), heap()
	ctx := context.Background()
	to := receivers(numLanes)
	traffic := func() {
		t.Helper()
		for _, a := range silos {
			for _, b := range silos {
				if a == b {
					continue
				}
				for _, r := range to {
					env := &Envelope{Message: &agentsilov1.AgentMessage{To: r, From: "Caller:acme:y", Message: "hi"}}
					if _, err := a.tr.Ask(ctx, b.addr, env); err != nil {
						t.Fatal(err)
					}
					if err := a.tr.Send(ctx, b.addr, &Envelope{Message: &agentsilov1.AgentMessage{To: r, From: "Caller:acme:y"}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	const relations = n * (n - 1) // each silo's peers, over all silos
	idle := func(round string) {
		t.Helper()
		traffic()
		busy := peerGoroutines() - g0
		if round == "after the first traffic" {
			if h := heap(); h > h0 {
				t.Logf("heap per peer on each silo, its streams open and quiet: %.1f KB", float64(h-h0)/relations/1024)
			}
		}
		testutil.WaitFor(t, "every peer closed for idleness "+round, func() bool {
			all := true
			for _, s := range silos {
				all = idleAll(s.tr) && all
			}
			return all
		})
		testutil.WaitFor(t, "at most 1 goroutine per idle peer on each silo "+round, func() bool {
			return peerGoroutines()-g0 <= relations
		})
		t.Logf("%s: %.1f goroutines per peer on each silo with traffic, %.1f idle", round, float64(busy)/relations, float64(peerGoroutines()-g0)/relations)
	}
	idle("after the first traffic")
	if h1 := heap(); h1 > h0 {
		perPeer := float64(h1-h0) / relations
		t.Logf("heap per idle peer on each silo: %.1f KB", perPeer/1024)
		if perPeer > 200*1024 {
			t.Errorf("an idle peer costs %.1f KB of heap on each silo, want at most 200 KB", perPeer/1024)
		}
	}
	// The streams open again for the next messages, and close again.
	idle("after more traffic")
	if d := downs.Load(); d != 0 {
		t.Fatalf("a stream closed for idleness was reported down %d times", d)
	}
}

// One-way messages written just before their stream closes for idleness
// are all handed on: the receiver ends its side of the stream only once
// its lanes have handed on what they had.
func TestIdleCloseHandsOnWhatWasSent(t *testing.T) {
	checkLeaks(t)
	gate := make(chan struct{})
	var got atomic.Int64
	hb := &testHandler{oneway: func(context.Context, string, *Envelope) {
		<-gate
		got.Add(1)
	}}
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	ctx := context.Background()
	// Open the stream, then queue one-way messages behind a held handler.
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("open")); err != nil {
		t.Fatal(err)
	}
	const sent = 20
	for range sent {
		if err := a.tr.Send(ctx, b.addr, &Envelope{Message: &agentsilov1.AgentMessage{To: "Echo:acme:x", From: "Caller:acme:y"}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the stream closed for idleness", func() bool { return idleAll(a.tr) })
	close(gate)
	testutil.WaitFor(t, fmt.Sprintf("%d one-way messages handed on", sent), func() bool { return got.Load() == sent })
	// And the peer is used again.
	if r, err := a.tr.Ask(ctx, b.addr, requestEnv("again")); err != nil || r.Message != "echo:again" {
		t.Fatalf("ask after idle: %v, %v", r, err)
	}
}

// A stream that carries nothing for IdleTimeout is closed by its sender's
// timer alone (no test hook), and the next Ask opens it again.
func TestIdleTimeoutClosesQuietStream(t *testing.T) {
	checkLeaks(t)
	a := startSilo(t, "a", "127.0.0.1:0", nil, func(c *Config) { c.IdleTimeout = 20 * time.Millisecond }, nil)
	b := startSilo(t, "b", "127.0.0.2:0", nil, nil, nil)
	ask := func() {
		t.Helper()
		env := &Envelope{Message: &agentsilov1.AgentMessage{To: "Echo:acme:x", From: "Caller:acme:y", Message: "hi"}}
		if _, err := a.tr.Ask(context.Background(), b.addr, env); err != nil {
			t.Fatal(err)
		}
	}
	closed := func() bool {
		a.tr.mu.RLock()
		p := a.tr.peers[b.addr]
		a.tr.mu.RUnlock()
		if p == nil {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.state == stateIdle
	}
	for round := range 2 {
		ask()
		testutil.WaitFor(t, fmt.Sprintf("round %d: the quiet stream closed for idleness", round), closed)
	}
}
