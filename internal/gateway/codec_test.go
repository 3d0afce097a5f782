package gateway

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// rawCodec sends and receives bytes as they are: a client that can send
// what the generated code refuses to encode.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// Hand-encoded messages, free to hold strings that are not UTF-8.
func wireString(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func wireVarint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// rawMessage is an AgentMessage REQUEST to `to` with text `text`.
func rawMessage(to, text string) []byte {
	return wireVarint(wireString(wireString(nil, 2, to), 7, text), 8, uint64(agentsilov1.Kind_KIND_REQUEST))
}

// rawCall is a ClientFrame carrying a Call of id with message m.
func rawCall(id uint64, m []byte) []byte {
	return wireString(nil, 2, string(wireString(wireVarint(nil, 1, id), 2, string(m))))
}

func rawHello(principal string) []byte {
	return wireString(nil, 1, string(wireString(nil, 1, principal)))
}

// rawSession opens a Session stream that sends and receives raw bytes.
type rawSession struct {
	t      testing.TB
	stream grpc.ClientStream
}

func (e *testEnv) rawSession(t testing.TB, ctx context.Context) *rawSession {
	t.Helper()
	desc := &grpc.StreamDesc{StreamName: "Session", ServerStreams: true, ClientStreams: true}
	stream, err := e.conn.NewStream(ctx, desc, "/agentsilo.v1.Gateway/Session", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	return &rawSession{t: t, stream: stream}
}

func (s *rawSession) send(b []byte) error { return s.stream.SendMsg(&b) }

// recv reads the next server frame, or the stream's end.
func (s *rawSession) recv() (*agentsilov1.ServerFrame, error) {
	var b []byte
	if err := s.stream.RecvMsg(&b); err != nil {
		return nil, err
	}
	f := &agentsilov1.ServerFrame{}
	if err := proto.Unmarshal(b, f); err != nil {
		s.t.Fatalf("the gateway sent a frame that does not decode: %v", err)
	}
	return f, nil
}

func (e *testEnv) rawAsk(ctx context.Context, req []byte) error {
	var resp []byte
	return e.conn.Invoke(ctx, "/agentsilo.v1.Gateway/Ask", &req, &resp, grpc.ForceCodecV2(rawCodec{}))
}

// TestBadBytes: requests that do not decode are InvalidArgument, on unary
// calls and for the one Call of a session that carries them (the stream
// goes on); a reply that is not UTF-8 is the call's Internal error; a push
// that is not UTF-8 is refused to its sender, and the session's later
// pushes arrive. Before, the first two were Internal, and the session
// stream ended with the bad frame.
func TestBadBytes(t *testing.T) {
	e := startGateway(t, nil)
	ctx := t.Context()
	if err := e.rawAsk(ctx, wireString(nil, 1, string(rawMessage("Echo:x", "\xffbad")))); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unary Ask, text not UTF-8: %v, want InvalidArgument", err)
	}
	if err := e.rawAsk(ctx, []byte{0xff, 0xff, 0xff}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unary Ask, not protobuf: %v, want InvalidArgument", err)
	}
	if err := e.rawAsk(ctx, wireString(nil, 1, string(rawMessage("Echo:x", "good")))); err != nil {
		t.Fatalf("unary Ask, raw but good: %v", err)
	}

	s := e.rawSession(t, ctx)
	if err := s.send(rawHello("alice")); err != nil {
		t.Fatal(err)
	}
	if f, err := s.recv(); err != nil || f.GetWelcome() == nil {
		t.Fatalf("Welcome: %v, %v", f, err)
	}
	if err := s.send(rawCall(7, rawMessage("Echo:x", "\xffbad"))); err != nil {
		t.Fatal(err)
	}
	f, err := s.recv()
	if err != nil {
		t.Fatalf("after a bad call: %v", err)
	}
	wantCode(t, f.GetResult(), codes.InvalidArgument)
	if f.GetResult().GetCallId() != 7 {
		t.Fatalf("result %v, want call 7's", f.GetResult())
	}
	if err := s.send(rawCall(8, rawMessage("Echo:x", "good"))); err != nil {
		t.Fatal(err)
	}
	if f, err = s.recv(); err != nil {
		t.Fatal(err)
	}
	wantText(t, f.GetResult(), "good")
	if err := s.send(rawCall(9, rawMessage("BadUTF8:x", "reply"))); err != nil {
		t.Fatal(err)
	}
	if f, err = s.recv(); err != nil {
		t.Fatalf("after a reply that is not UTF-8: %v", err)
	}
	wantCode(t, f.GetResult(), codes.Internal)
	// A frame that says nothing readable ends the stream, as a client's
	// error.
	if err := s.send([]byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("after garbage: %v, want InvalidArgument", err)
	}

	// Pushes: a bad one is refused to its sender.
	sess := e.open(t, &agentsilov1.Hello{Principal: "alice"})
	push := func(text string) error {
		return e.rt.Send(ctx, &grain.Message{To: sess.welcome.Address, From: "Echo:alice:e", Message: text})
	}
	if err := push("\xffbad"); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("push not UTF-8: %v, want InvalidArgument", err)
	}
	if err := push("good"); err != nil {
		t.Fatal(err)
	}
	if p := sess.recv().GetPush(); p.GetMessage() != "good" {
		t.Fatalf("push %v, want good", p)
	}
}

// FuzzSessionFrame sends a Hello and then one raw frame on a session: the
// gateway answers with a Result, or ends the stream with a client's error,
// never Internal or Unknown, and serves the next session. The seeds (run by
// every `go test`) are a good call, bad UTF-8 in each kind of field, a bad
// call id, truncated and garbage bytes.
func FuzzSessionFrame(f *testing.F) {
	good := rawMessage("Echo:x", "hi")
	for _, seed := range [][]byte{
		rawCall(1, good),
		rawCall(2, rawMessage("Echo:x", "\xff")),
		rawCall(3, rawMessage("Echo:\xff", "x")),
		rawCall(4, wireString(good, 12, string(wireString(wireString(nil, 1, "k"), 2, "\xfe")))), // state value
		rawCall(5, wireString(good, 11, "\xc3\x28")),                                             // files
		rawCall(6, rawMessage("BadUTF8:x", "x")),
		rawCall(1<<63, good),
		wireString(nil, 3, string(wireVarint(nil, 1, 9))),      // a Cancel
		wireString(nil, 1, string(wireString(nil, 1, "\xff"))), // a second Hello, bad
		rawCall(7, good)[:5],
		{0xff, 0xff, 0xff, 0xff},
		{},
	} {
		f.Add(seed)
	}
	e := startGateway(f, nil)
	f.Fuzz(func(t *testing.T, frame []byte) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		s := e.rawSession(t, ctx)
		if err := s.send(rawHello("fuzz")); err != nil {
			t.Fatal(err)
		}
		if f, err := s.recv(); err != nil || f.GetWelcome() == nil {
			t.Fatalf("Welcome: %v, %v", f, err)
		}
		if err := s.send(frame); err == nil {
			s.stream.CloseSend()
		}
		for {
			_, err := s.recv()
			if err == nil {
				continue // a Result, of any code: the call's own
			}
			if errors.Is(err, io.EOF) {
				break // the stream ended OK
			}
			switch status.Code(err) {
			case codes.Internal, codes.Unknown:
				t.Fatalf("frame %x: the stream ended with %v", frame, err)
			}
			break
		}
		// The gateway serves on.
		s = e.rawSession(t, ctx)
		for _, b := range [][]byte{rawHello("fuzz"), rawCall(1, rawMessage("Echo:x", "hi"))} {
			if err := s.send(b); err != nil {
				t.Fatal(err)
			}
		}
		for {
			f, err := s.recv()
			if err != nil {
				t.Fatalf("after frame %x: %v", frame, err)
			}
			if r := f.GetResult(); r != nil {
				wantText(t, r, "hi")
				return
			}
		}
	})
}
