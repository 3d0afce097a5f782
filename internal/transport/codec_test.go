package transport

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// request is a typical request envelope, as the transport sends one.
func request() *Envelope {
	return &Envelope{
		Kind:           agentsilov1.Kind_KIND_REQUEST,
		CallId:         42,
		ViewVersion:    7,
		Hops:           1,
		DeadlineUnixMs: 1_790_000_000_000,
		Message: &agentsilov1.AgentMessage{
			Id:          "0192f0c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
			To:          "Bench:bench:r17",
			From:        "Session:bench:s",
			Kind:        agentsilov1.Kind_KIND_REQUEST,
			Data:        []byte("payload"),
			CallChainId: "0192f0c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
		},
	}
}

// codecBatches are batches with every field the codec writes by hand and
// every one it leaves to the protobuf runtime.
func codecBatches() map[string]*agentsilov1.PeerBatch {
	full := &agentsilov1.AgentMessage{
		Id: "id", To: "T:o:a", From: "F:o:a", OnBehalfOf: "alice", Channel: "c",
		MessageType: "mt", Message: "héllo", Kind: agentsilov1.Kind_KIND_EVENT,
		DataType: "application/json", Data: []byte(`{"x":1}`), Files: []string{"a.txt", "b.txt"},
		CorrelationId: "corr", Traceparent: "00-abc-def-01", Attempt: 3, CallChainId: "chain",
		Topic: "t", Subscription: "s", IdempotencyKey: "k",
	}
	rich := proto.Clone(full).(*agentsilov1.AgentMessage)
	rich.State = map[string]string{"a": "1", "b": "2"}
	rich.Deadline = timestamppb.New(timestamppb.Now().AsTime())
	unknown := proto.Clone(full).(*agentsilov1.AgentMessage)
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5))
	big := proto.Clone(full).(*agentsilov1.AgentMessage)
	big.Data = bytes.Repeat([]byte{7}, 100_000)
	negative := &Envelope{Kind: agentsilov1.Kind(-3), ViewVersion: -1, DeadlineUnixMs: -5, Message: &agentsilov1.AgentMessage{Kind: agentsilov1.Kind(-1), Id: "x"}}
	return map[string]*agentsilov1.PeerBatch{
		"empty":    {},
		"hello":    {Hello: &agentsilov1.PeerHello{Silo: "a", ViewVersion: 9}},
		"request":  {Envelopes: []*Envelope{request()}},
		"batch":    {Envelopes: []*Envelope{request(), request(), {Kind: agentsilov1.Kind_KIND_ONE_WAY, Message: full}}},
		"reply":    {Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_RESPONSE, CallId: 42, Message: full}}},
		"error":    {Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_RESPONSE, CallId: 1, Error: &agentsilov1.Status{Code: 14, Message: "gone"}, NotRun: true}}},
		"cancel":   {Envelopes: []*Envelope{{CallId: 5, Cancel: true}}},
		"rich":     {Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_REQUEST, Message: rich}}},
		"unknown":  {Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_REQUEST, Message: unknown}}},
		"big":      {Envelopes: []*Envelope{{Kind: agentsilov1.Kind_KIND_REQUEST, Message: big}}},
		"negative": {Envelopes: []*Envelope{negative}},
		"blank":    {Envelopes: []*Envelope{{Message: &agentsilov1.AgentMessage{}}}},
	}
}

func codecMarshal(t testing.TB, b *agentsilov1.PeerBatch) []byte {
	t.Helper()
	bs, err := peerCodec{}.Marshal(b)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	defer bs.Free()
	return bs.Materialize()
}

// What the codec writes, protobuf reads as the same batch; what protobuf
// writes, the codec does.
func TestPeerCodecRoundTrip(t *testing.T) {
	for name, b := range codecBatches() {
		t.Run(name, func(t *testing.T) {
			var viaProto agentsilov1.PeerBatch
			if err := proto.Unmarshal(codecMarshal(t, b), &viaProto); err != nil {
				t.Fatalf("proto.Unmarshal of the codec's bytes: %v", err)
			}
			if !proto.Equal(b, &viaProto) {
				t.Fatalf("codec -> proto:\n got %v\nwant %v", &viaProto, b)
			}
			wire, err := proto.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			var viaCodec agentsilov1.PeerBatch
			if err := (peerCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &viaCodec); err != nil {
				t.Fatalf("codec Unmarshal of proto's bytes: %v", err)
			}
			if !proto.Equal(b, &viaCodec) {
				t.Fatalf("proto -> codec:\n got %v\nwant %v", &viaCodec, b)
			}
		})
	}
}

// A string that is not UTF-8 is not checked on the way out (the transport
// checks each message before it joins a batch), and it is refused on the
// way in, by the codec as by proto.Unmarshal: it cannot reach a handler.
func TestPeerCodecInvalidUTF8(t *testing.T) {
	for _, m := range []*agentsilov1.AgentMessage{{To: "T:o:\xff"}, {Files: []string{"ok", "\xc3"}}} {
		wire := codecMarshal(t, &agentsilov1.PeerBatch{Envelopes: []*Envelope{{Message: m}}})
		var viaProto, viaCodec agentsilov1.PeerBatch
		if err := proto.Unmarshal(wire, &viaProto); err == nil {
			t.Fatalf("proto.Unmarshal took invalid UTF-8 in %v", m)
		}
		if err := (peerCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &viaCodec); err == nil {
			t.Fatalf("the codec took invalid UTF-8 in %v", m)
		}
	}
}

// Other messages go through gRPC's own codec.
func TestPeerCodecOtherMessages(t *testing.T) {
	in := &agentsilov1.PeerHello{Silo: "b", ViewVersion: 3}
	bs, err := peerCodec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out agentsilov1.PeerHello
	if err := (peerCodec{}).Unmarshal(bs, &out); err != nil || !proto.Equal(in, &out) {
		t.Fatalf("hello: %v, %v", &out, err)
	}
	if got := (peerCodec{}).Name(); got != "proto" {
		t.Fatalf("Name() = %q: silos with gRPC's codec would not read this one", got)
	}
}

func BenchmarkPeerCodec(b *testing.B) {
	batch := &agentsilov1.PeerBatch{}
	for range 16 {
		batch.Envelopes = append(batch.Envelopes, request())
	}
	wire, err := proto.Marshal(batch)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bs, err := peerCodec{}.Marshal(batch)
			if err != nil {
				b.Fatal(err)
			}
			bs.Free()
		}
	})
	b.Run("marshal/grpc-proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bs, err := protoCodec.Marshal(batch)
			if err != nil {
				b.Fatal(err)
			}
			bs.Free()
		}
	})
	b.Run("unmarshal/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out agentsilov1.PeerBatch
			if err := unmarshalBatch(wire, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal/proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out agentsilov1.PeerBatch
			if err := proto.Unmarshal(wire, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzPeerCodec: on any input, the codec's Unmarshal fails exactly when
// proto.Unmarshal does and otherwise reads the same batch, which the codec's
// Marshal writes back as protobuf that reads the same again.
func FuzzPeerCodec(f *testing.F) {
	for _, b := range codecBatches() {
		w, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(w)
	}
	f.Add([]byte{0x12, 0x02, 0x1a, 0x00})             // an envelope with an empty message
	f.Add([]byte{0x12, 0x04, 0x1a, 0x02, 0x0a, 0x05}) // truncated
	f.Add([]byte{0x12, 0x02, 0x08, 0x01, 0x12, 0x02, 0x08, 0x02})
	f.Fuzz(func(t *testing.T, wire []byte) {
		var want, got agentsilov1.PeerBatch
		werr := proto.Unmarshal(wire, &want)
		gerr := unmarshalBatch(wire, &got)
		if werr == nil && len(want.Envelopes) > MaxReceivedBatch {
			if gerr != errBatchTooLarge {
				t.Fatalf("%d envelopes: %v", len(want.Envelopes), gerr)
			}
			return
		}
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Unmarshal: %v; codec: %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !proto.Equal(&want, &got) {
			t.Fatalf("codec read\n%v\nproto read\n%v", &got, &want)
		}
		// Read into a batch that held another (the readers reuse theirs).
		reused := &agentsilov1.PeerBatch{Envelopes: []*Envelope{{CallId: 7}, {Cancel: true}, {Kind: agentsilov1.Kind_KIND_RESPONSE}}}
		if err := unmarshalBatch(wire, reused); err != nil || !proto.Equal(reused, &want) {
			t.Fatalf("read into a used batch: %v, %v", reused, err)
		}
		bs, err := peerCodec{}.Marshal(&got)
		if _, perr := proto.Marshal(&got); (err == nil) != (perr == nil) {
			t.Fatalf("codec Marshal: %v; proto.Marshal: %v", err, perr)
		}
		if err != nil {
			return
		}
		var again agentsilov1.PeerBatch
		if err := proto.Unmarshal(bs.Materialize(), &again); err != nil || !proto.Equal(&again, &want) {
			t.Fatalf("written back and read again: %v, %v", &again, err)
		}
		bs.Free()
	})
}

// A stream message of more than MaxReceivedBatch envelopes is refused
// before its envelopes are decoded, on the fast path and on protobuf's; one
// of MaxReceivedBatch is read.
func TestPeerCodecBatchBound(t *testing.T) {
	empty := []byte{0x12, 0x00}         // an empty envelope: 2 bytes
	unknown := []byte{0x98, 0x06, 0x01} // field 99, varint: protobuf's path
	for _, tc := range []struct {
		name   string
		n      int
		suffix []byte
		ok     bool
	}{
		{"at the bound", MaxReceivedBatch, nil, true},
		{"over", MaxReceivedBatch + 1, nil, false},
		{"at the bound, slow path", MaxReceivedBatch, unknown, true},
		{"over, slow path", MaxReceivedBatch + 1, unknown, false},
		{"4 MiB of empty envelopes", 2 << 20, nil, false},
	} {
		wire := append(bytes.Repeat(empty, tc.n), tc.suffix...)
		var pb agentsilov1.PeerBatch
		err := peerCodec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &pb)
		if tc.ok {
			if err != nil || len(pb.Envelopes) != tc.n {
				t.Errorf("%s: %d envelopes read, %v", tc.name, len(pb.Envelopes), err)
			}
		} else if err != errBatchTooLarge {
			t.Errorf("%s: %v (%d envelopes read), want %v", tc.name, err, len(pb.Envelopes), errBatchTooLarge)
		}
	}
}

// A silo whose peer streams use gRPC's protobuf codec (as silos of earlier
// versions do) and one with peerCodec talk both ways: requests with every
// kind of field arrive whole, replies come back whole.
func TestPeerCodecMixedVersions(t *testing.T) {
	checkLeaks(t)
	sent := codecBatches()["reply"].Envelopes[0].Message // every simple field
	sent = proto.Clone(sent).(*agentsilov1.AgentMessage)
	sent.State = map[string]string{"k": "v"} // and one that is not
	handler := func(name string) *testHandler {
		return &testHandler{request: func(_ context.Context, from string, env *Envelope) (*agentsilov1.AgentMessage, error) {
			if !proto.Equal(env.Message, sent) {
				return nil, fmt.Errorf("%s got %v, want %v", name, env.Message, sent)
			}
			r := proto.Clone(env.Message).(*agentsilov1.AgentMessage)
			r.Message = "echo:" + name
			return r, nil
		}}
	}
	ask := func(from, to *testSilo) {
		t.Helper()
		r, err := from.tr.Ask(context.Background(), to.addr, &Envelope{Message: sent})
		if err != nil {
			t.Fatalf("%s -> %s: %v", from.name, to.name, err)
		}
		want := proto.Clone(sent).(*agentsilov1.AgentMessage)
		want.Message = "echo:" + to.name
		if !proto.Equal(r, want) {
			t.Fatalf("%s -> %s: reply %v, want %v", from.name, to.name, r, want)
		}
	}
	old := func(c *Config) {
		c.DialOptions = append(c.DialOptions, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(protoCodec)))
	}
	newServer := startSilo(t, "new", "127.0.0.2:0", handler("new"), nil, nil)
	oldClient := startSilo(t, "oldc", "127.0.0.1:0", nil, old, nil)
	ask(oldClient, newServer)

	// A server with gRPC's codec (a later ForceServerCodecV2 wins).
	tr, err := New(Config{Self: "old", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(tr.ServerOptions(), grpc.ForceServerCodecV2(protoCodec))...)
	tr.Register(srv, handler("old"))
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served; tr.Close() }()
	newClient := startSilo(t, "newc", "127.0.0.4:0", nil, nil, nil)
	ask(newClient, &testSilo{name: "old", addr: lis.Addr().String(), tr: tr})
}
