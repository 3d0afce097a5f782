package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/internal/protocol"
)

// Every message the client sends is checked before anything is sent. A
// proto3 string must be valid UTF-8, and gRPC's encoder finds out that one
// is not only when a stream writes the frame; it then ends that stream with
// the error. For Ask, Send and Event that stream is the session's: every
// call in flight on it failed with Unavailable, and the call itself, taken
// for one that never went out, was sent again on the re-attached stream,
// breaking it again, until its deadline. Checked up front, such a message
// is InvalidArgument at once and nothing is sent (checkUTF8 in call, and
// checkRequest for the unary calls).

// checkUTF8 returns an InvalidArgument error naming the first string field
// of m, in nested messages, lists and maps too, that is not valid UTF-8.
func checkUTF8(m proto.Message) error { return protocol.CheckUTF8(m) }

// checkRequest is the unary interceptor of every connection: it checks a
// request with checkUTF8 before it is sent.
func checkRequest(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(proto.Message); ok {
		if err := checkUTF8(m); err != nil {
			return err
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
