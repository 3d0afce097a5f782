package transport

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"

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
