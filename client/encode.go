package client

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/grain/errs"
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
func checkUTF8(m proto.Message) error {
	if path := badUTF8(m.ProtoReflect()); path != "" {
		return errs.New(codes.InvalidArgument, "%s is not valid UTF-8 (text fields must be; bytes go in data)", path)
	}
	return nil
}

// badUTF8 returns the path of the first string in m that is not valid
// UTF-8 (`message`, `state["k"]`, `files[1]`, `rule.owner_pattern`), or "".
func badUTF8(m protoreflect.Message) (path string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				key := k.String()
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(key) {
					path = fmt.Sprintf("%s key %q", name, key)
				} else if bad, rest := badValue(fd.MapValue(), mv); bad {
					path = fmt.Sprintf("%s[%q]%s", name, key, rest)
				}
				return path == ""
			})
		case fd.IsList():
			for i, l := 0, v.List(); i < l.Len() && path == ""; i++ {
				if bad, rest := badValue(fd, l.Get(i)); bad {
					path = fmt.Sprintf("%s[%d]%s", name, i, rest)
				}
			}
		default:
			if bad, rest := badValue(fd, v); bad {
				path = name + rest
			}
		}
		return path == ""
	})
	return path
}

// badValue says whether v, a value of field fd, is or holds a string that
// is not valid UTF-8, and, if that string is in a nested message, the rest
// of its path (".field...").
func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (bad bool, rest string) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return !utf8.ValidString(v.String()), ""
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if p := badUTF8(v.Message()); p != "" {
			return true, "." + p
		}
	}
	return false, ""
}

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
