package topics

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/grain"
)

// copyMessage copies every field the message type declares (a field added
// to it and not to copyMessage fails here), deeply: changing the copy's
// bytes, files, state or deadline leaves the original as it was.
func TestCopyMessageCopiesEveryField(t *testing.T) {
	m := &grain.Message{}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.IsMap():
			r.Mutable(f).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case f.IsList():
			r.Mutable(f).List().Append(protoreflect.ValueOfString("f"))
		case f.Kind() == protoreflect.MessageKind:
			sub := r.Mutable(f).Message()
			sf := sub.Descriptor().Fields()
			for j := range sf.Len() {
				sub.Set(sf.Get(j), nonZero(t, sf.Get(j)))
			}
		default:
			r.Set(f, nonZero(t, f))
		}
	}
	r.SetUnknown(protoreflect.RawFields{0xf8, 0x01, 0x01}) // field 31, varint 1
	c := copyMessage(m)
	if !proto.Equal(c, m) {
		t.Fatalf("copy differs:\n%v\n%v", c, m)
	}
	c.Data[0]++
	c.Files[0] = "g"
	c.State["k"] = "w"
	c.Deadline.Seconds++
	if m.Data[0] == c.Data[0] || m.Files[0] != "f" || m.State["k"] != "v" || m.Deadline.Seconds == c.Deadline.Seconds {
		t.Fatalf("the copy shares its parts with the original: %v", m)
	}
	if c := copyMessage(nil); c == nil || !proto.Equal(c, &grain.Message{}) {
		t.Fatalf("a copy of nil: %v", c)
	}
}

// nonZero is a value of f's kind that is not its zero.
func nonZero(t *testing.T, f protoreflect.FieldDescriptor) protoreflect.Value {
	t.Helper()
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(f.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(f.Name()))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	}
	t.Fatalf("field %s: add its kind %s to nonZero", f.FullName(), f.Kind())
	return protoreflect.Value{}
}
