//go:build !race

package transport

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// maxAskAllocs bounds the allocations of one cross-silo Ask through the
// transport, both silos counted (they share this process): the request's
// message and envelope, the call, gRPC's frames and buffers on both sides,
// the decoded request and reply, and the reply's envelope. Most of them are
// gRPC's (BenchmarkTransport/ask-async reports them, next to the raw
// stream's). It was 49 with gRPC's protobuf codec, which allocates each
// string and message of an envelope apart (see peerCodec): 40 since; 28
// since the caller's call and its channel are recycled (callPool), a reply's
// envelope is made with its call's context, a small batch is written into a
// pooled buffer and each reader reads into one batch again and again; the
// bound is what that reached. Of the 28, 13 are gRPC's (frames, buffers,
// headers), 2 the BufferSlices the codec returns to it; the rest are the
// caller's message and envelope, the decoded envelopes (an envelope with its
// message, and their strings, on each side), the inbound call and its reply
// function, and the handler's reply.
// The race detector allocates on its own, so this runs without it (.ci/run
// runs it so).
const maxAskAllocs = 28

func TestTransportAskAllocs(t *testing.T) {
	checkLeaks(t)
	h := newOrderedAsync()
	h.noLog = true
	b := startSilo(t, "b", "127.0.0.2:0", &h.testHandler, nil, nil)
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	ctx := context.Background()
	ask := func() {
		m, err := a.tr.Ask(ctx, b.addr, &Envelope{Message: &agentsilov1.AgentMessage{To: "Echo:acme:x", From: "Caller:acme:y", Message: "pingt", Id: "0190b6a4-0000-7000-8000-000000000000"}})
		if err != nil || m.Message != "echo:pingt" {
			t.Fatalf("ask: %v, %v", m, err)
		}
	}
	ask()
	n := testing.AllocsPerRun(2000, ask)
	if n > maxAskAllocs {
		t.Fatalf("a cross-silo Ask allocates %.1f times, want at most %d", n, maxAskAllocs)
	}
	t.Logf("a cross-silo Ask allocates %.1f times (both silos)", n)
}

// Decoding a request envelope (into a batch read into before) allocates
// the envelope with its message, and one copy of its bytes that its strings
// and data share: 2 (3 until the data shared the copy), where the protobuf
// runtime allocates each string and message apart. A message keeps none of
// the wire buffer, and what is done to its data leaves its strings alone.
func TestPeerCodecAllocs(t *testing.T) {
	wire := codecMarshal(t, &agentsilov1.PeerBatch{Envelopes: []*Envelope{request()}})
	var b agentsilov1.PeerBatch
	n := testing.AllocsPerRun(1000, func() {
		if err := unmarshalBatch(wire, &b); err != nil {
			t.Fatal(err)
		}
	})
	if n > 2 {
		t.Fatalf("decoding a request allocates %.0f times, want at most 2", n)
	}
	var p agentsilov1.PeerBatch
	pn := testing.AllocsPerRun(1000, func() {
		if err := proto.Unmarshal(wire, &p); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("decoding a request: %.0f allocations (proto.Unmarshal: %.0f)", n, pn)
	if !proto.Equal(&b, &p) {
		t.Fatalf("codec %v, proto %v", &b, &p)
	}
	for i := range wire {
		wire[i] = 0 // the message must not see the buffer it came from
	}
	m := b.Envelopes[0].Message
	if m.To != "Bench:bench:r17" || string(m.Data) != "payload" || !strings.HasPrefix(m.Id, "0192") {
		t.Fatalf("the decoded message changed with the wire buffer: %v", m)
	}
	before := proto.Clone(m).(*agentsilov1.AgentMessage)
	for i := range m.Data {
		m.Data[i] = 'x'
	}
	m.Data = append(m.Data, "and more, past its capacity"...)
	m.Data = append(m.Data[:0], before.Data...)
	if !proto.Equal(m, before) {
		t.Fatalf("writing to the data changed the message: %v, was %v", m, before)
	}
}
