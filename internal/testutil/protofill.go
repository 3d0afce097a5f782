package testutil

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// FillProto sets every field of m, nested messages, lists and maps
// included, to a value that is not its zero, for tests that check a
// conversion or a copy carries every field a message declares (a field
// added later is filled too, and fails such a test until it is carried).
func FillProto(t testing.TB, m protoreflect.Message) {
	t.Helper()
	fillProto(t, m, 0)
}

// maxFillDepth stops a message type that contains itself.
const maxFillDepth = 8

func fillProto(t testing.TB, m protoreflect.Message, depth int) {
	if depth > maxFillDepth {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			v := m.Mutable(fd).Map()
			key := nonZero(t, fd.MapKey()).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				e := v.NewValue()
				fillProto(t, e.Message(), depth+1)
				v.Set(key, e)
			} else {
				v.Set(key, nonZero(t, fd.MapValue()))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				e := l.NewElement()
				fillProto(t, e.Message(), depth+1)
				l.Append(e)
			} else {
				l.Append(nonZero(t, fd))
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			fillProto(t, m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, nonZero(t, fd))
		}
	}
}

// nonZero is a value of fd's kind that is not its zero.
func nonZero(t testing.TB, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fd.Name()))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	}
	t.Fatalf("field %s: add its kind %s to testutil.nonZero", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}
