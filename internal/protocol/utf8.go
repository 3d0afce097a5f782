package protocol

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A proto3 string must be valid UTF-8: gRPC's encoder refuses a message
// holding one that is not, and its decoder a request holding one. Both
// sides check what they send with CheckUTF8 first, so that such a message
// is one call's InvalidArgument (or Internal, for a reply), never a broken
// stream.

// CheckUTF8 returns an InvalidArgument error naming the first string field
// of m, in nested messages, lists and maps too, that is not valid UTF-8.
func CheckUTF8(m proto.Message) error {
	if path := badUTF8(m.ProtoReflect()); path != "" {
		return badUTF8Error(path)
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

// CheckMessage is CheckUTF8 for an AgentMessage, without reflection: the
// check on every push, reply and forwarded message.
func CheckMessage(m *agentsilov1.AgentMessage) error {
	if m == nil {
		return nil
	}
	for _, f := range [...]struct {
		name, v string
	}{
		{"id", m.Id}, {"to", m.To}, {"from", m.From}, {"on_behalf_of", m.OnBehalfOf},
		{"channel", m.Channel}, {"message_type", m.MessageType}, {"message", m.Message},
		{"data_type", m.DataType}, {"correlation_id", m.CorrelationId},
		{"traceparent", m.Traceparent}, {"call_chain_id", m.CallChainId},
		{"topic", m.Topic}, {"subscription", m.Subscription}, {"idempotency_key", m.IdempotencyKey},
	} {
		if !utf8.ValidString(f.v) {
			return badUTF8Error(f.name)
		}
	}
	for i, f := range m.Files {
		if !utf8.ValidString(f) {
			return badUTF8Error(fmt.Sprintf("files[%d]", i))
		}
	}
	for k, v := range m.State {
		if !utf8.ValidString(k) {
			return badUTF8Error(fmt.Sprintf("state key %q", k))
		}
		if !utf8.ValidString(v) {
			return badUTF8Error(fmt.Sprintf("state[%q]", k))
		}
	}
	return nil
}

func badUTF8Error(path string) error {
	return errs.New(codes.InvalidArgument, "%s is not valid UTF-8 (text fields must be; bytes go in data)", path)
}
