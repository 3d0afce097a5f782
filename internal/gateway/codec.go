package gateway

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A request that does not decode (a string field that is not UTF-8, bytes
// that are not protobuf) is the client's error, InvalidArgument, and on a
// session it fails the one call it carries. gRPC's proto codec would make
// it Internal, and end a session stream with it, so the gateway serves with
// codec: gRPC's proto codec, except that an agentsilo request it cannot
// decode is reset and marked with the decoding error (an unknown field of
// number undecodedField), and decodes. Each path then refuses a marked
// request: the unary interceptor unaryDecoded, and the session handler for
// its frames (a Call keeps its call_id, read from the raw bytes, so that
// its Result can say which call failed).
//
// What the gateway sends is checked before it is written, since a frame
// that does not encode ends its stream: a push that is not valid UTF-8 is
// refused to its sender with InvalidArgument (DeliverToSession), and such
// a reply is the call's Internal error (checkReply).

// undecodedField is the field number of the mark: the largest valid one,
// which no agentsilo message uses. A client that sends it gets its request
// refused, as if it did not decode.
const undecodedField = protowire.MaxValidNumber

type codec struct{ base encoding.CodecV2 }

func newCodec() codec { return codec{base: encoding.GetCodecV2(proto.Name)} }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(protobuf.Message)
	if !ok || !strings.HasPrefix(string(protobuf.MessageName(m)), "agentsilo.") {
		return err
	}
	protobuf.Reset(m)
	if f, ok := m.(*agentsilov1.ClientFrame); ok {
		if id, ok := callID(data.Materialize()); ok {
			f.Frame = &agentsilov1.ClientFrame_Call{Call: &agentsilov1.Call{CallId: id}}
		}
	}
	mark := protowire.AppendTag(nil, undecodedField, protowire.BytesType)
	mark = protowire.AppendString(mark, err.Error())
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// callID reads the call_id of a ClientFrame's Call from its encoding.
func callID(b []byte) (uint64, bool) {
	call, ok := field(b, 2, protowire.BytesType) // ClientFrame.call
	if !ok {
		return 0, false
	}
	id, ok := field(call, 1, protowire.VarintType) // Call.call_id
	if !ok {
		return 0, false
	}
	v, n := protowire.ConsumeVarint(id)
	return v, n > 0
}

// field returns the last occurrence of field num of type typ in b (the
// value's bytes: a varint's encoding, a length-delimited field's contents).
func field(b []byte, num protowire.Number, typ protowire.Type) (out []byte, found bool) {
	for len(b) > 0 {
		n, t, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return out, found
		}
		vl := protowire.ConsumeFieldValue(n, t, b[tl:])
		if vl < 0 {
			return out, found
		}
		if n == num && t == typ {
			v := b[tl : tl+vl]
			if t == protowire.BytesType {
				v, _ = protowire.ConsumeBytes(v)
			}
			out, found = v, true
		}
		b = b[tl+vl:]
	}
	return out, found
}

// decodeError returns InvalidArgument if m was marked as undecodable.
func decodeError(m protobuf.Message) error {
	if m == nil {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		n, t, tl := protowire.ConsumeTag(u)
		if tl < 0 {
			return nil
		}
		vl := protowire.ConsumeFieldValue(n, t, u[tl:])
		if vl < 0 {
			return nil
		}
		if n == undecodedField && t == protowire.BytesType {
			why, _ := protowire.ConsumeString(u[tl : tl+vl])
			return errs.New(codes.InvalidArgument, "the request does not decode: %s", strings.TrimPrefix(why, "proto: "))
		}
		u = u[tl+vl:]
	}
	return nil
}

// unaryDecoded refuses a unary request that did not decode.
func unaryDecoded(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if m, ok := req.(protobuf.Message); ok {
		if err := decodeError(m); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// checkReply turns an agent's reply that cannot be encoded into Internal.
func checkReply(r *agentsilov1.AgentMessage) error {
	if err := protocol.CheckMessage(r); err != nil {
		return errs.New(codes.Internal, "the turn ran, but the reply of %s cannot be sent: %s", protocol.Clip(r.GetFrom()), errs.FromStatus(err).Error())
	}
	return nil
}
