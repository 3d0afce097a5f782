package transport

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// slowFields are the fields the codec's fast path leaves to the protobuf
// runtime on purpose: a message carrying one is written by proto.Marshal
// and read by proto.Unmarshal whole (see simple). Every other field of a
// message the codec writes by hand must be written and read by the fast
// path itself.
var slowFields = map[protoreflect.FullName]bool{
	"agentsilo.v1.AgentMessage.state":    true,
	"agentsilo.v1.AgentMessage.deadline": true,
}

// fieldCase is a batch in which one field (path) is set, and nothing else
// but what holds it.
type fieldCase struct {
	path  string
	slow  bool // the field is one of slowFields, or inside one
	batch *agentsilov1.PeerBatch
}

// fieldCases walks the descriptor of PeerBatch and of every message a
// batch can hold (PeerEnvelope, AgentMessage, and those the codec hands
// to the protobuf runtime), and returns one case per field, found by the
// descriptor, not by a list: a field added to the proto is a new case.
func fieldCases() []fieldCase {
	var out []fieldCase
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor, path string, slow bool, wrap func(protoreflect.Message) *agentsilov1.PeerBatch)
	walk = func(md protoreflect.MessageDescriptor, path string, slow bool, wrap func(protoreflect.Message) *agentsilov1.PeerBatch) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			m := newOf(md)
			setField(m, fd, 0)
			p := path + "." + string(fd.Name())
			s := slow || slowFields[fd.FullName()]
			out = append(out, fieldCase{path: p, slow: s, batch: wrap(m)})
			if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
				walk(fd.Message(), p, s, func(sub protoreflect.Message) *agentsilov1.PeerBatch {
					parent := newOf(md)
					if fd.IsList() {
						parent.Mutable(fd).List().Append(protoreflect.ValueOfMessage(sub))
					} else {
						parent.Set(fd, protoreflect.ValueOfMessage(sub))
					}
					return wrap(parent)
				})
			}
		}
	}
	root := (&agentsilov1.PeerBatch{}).ProtoReflect().Descriptor()
	walk(root, "PeerBatch", false, func(m protoreflect.Message) *agentsilov1.PeerBatch {
		return m.Interface().(*agentsilov1.PeerBatch)
	})
	return out
}

func newOf(md protoreflect.MessageDescriptor) protoreflect.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		panic(err) // every message of peer.proto is linked in
	}
	return mt.New()
}

// setField sets fd of m to a value that is not its default: two elements
// of a list or map, every field of a message but slowFields (depth bounded), a negative
// number for a signed integer (ten bytes on the wire), a number above 2^31
// for an unsigned one, a string that is not ASCII.
func setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for i := range 2 {
			mp.Set(scalar(fd.MapKey(), i).MapKey(), element(mp.NewValue, fd.MapValue(), i, depth))
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		for i := range 2 {
			l.Append(element(l.NewElement, fd, i, depth))
		}
	default:
		m.Set(fd, element(func() protoreflect.Value { return m.NewField(fd) }, fd, 0, depth))
	}
}

// element is the i-th value of fd's kind; newMsg makes an empty message of
// fd's message type.
func element(newMsg func() protoreflect.Value, fd protoreflect.FieldDescriptor, i, depth int) protoreflect.Value {
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
		return scalar(fd, i)
	}
	v := newMsg()
	if depth < 3 {
		sub := v.Message()
		fields := sub.Descriptor().Fields()
		for j := range fields.Len() {
			if f := fields.Get(j); !slowFields[f.FullName()] { // they have cases of their own
				setField(sub, f, depth+1)
			}
		}
	}
	return v
}

func scalar(fd protoreflect.FieldDescriptor, i int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1 - i%vals.Len()).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-7 - i))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-(1 << 40) - int64(i))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1<<31 + uint32(i))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1<<40 + uint64(i))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5 + float32(i))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(2.5 + float64(i))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d-é", fd.Name(), i))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("\x00%s-%d\xff", fd.Name(), i)))
	}
	panic(fmt.Sprintf("field %s: kind %v has no test value", fd.FullName(), fd.Kind()))
}

// Every field of every message a peer batch carries, found by walking the
// descriptors, survives the codec both ways on its own and with every other
// field set: what the codec writes, proto.Unmarshal reads back equal; what
// proto.Marshal writes, the codec's fast path reads equal (without handing
// the batch to proto.Unmarshal), except the fields slowFields names. A field
// added to the proto and not to the codec's hand-written lists fails here.
// FuzzPeerCodec checks the reading side against proto.Unmarshal on any
// input.
func TestPeerCodecEveryField(t *testing.T) {
	cases := fieldCases()
	// All of them at once, the slow ones apart (a message with one of them
	// goes to the protobuf runtime whole).
	all := func(slow bool) *agentsilov1.PeerBatch {
		b := &agentsilov1.PeerBatch{}
		for _, c := range cases {
			if c.slow == slow {
				proto.Merge(b, c.batch)
			}
		}
		return b
	}
	// And every fast field of a message over smallMessage, which the fast
	// path reads in two passes.
	large := all(false)
	for _, e := range large.Envelopes {
		if e.Message != nil {
			e.Message.Data = bytes.Repeat([]byte{0xfe}, 2*smallMessage)
		}
	}
	cases = append(cases, fieldCase{path: "every fast field", batch: all(false)}, fieldCase{path: "every fast field, large", batch: large},
		fieldCase{path: "every slow field", slow: true, batch: all(true)})
	names := map[string]bool{}
	for _, c := range cases {
		names[c.path] = true
		t.Run(c.path, func(t *testing.T) {
			if proto.Equal(c.batch, &agentsilov1.PeerBatch{}) {
				t.Fatalf("the case sets nothing")
			}
			var viaProto agentsilov1.PeerBatch
			if err := proto.Unmarshal(codecMarshal(t, c.batch), &viaProto); err != nil {
				t.Fatalf("proto.Unmarshal of what the codec wrote: %v", err)
			}
			if !proto.Equal(c.batch, &viaProto) {
				t.Fatalf("the codec's Marshal does not write %s:\n sent %v\n read %v", c.path, c.batch, &viaProto)
			}
			wire, err := proto.Marshal(c.batch)
			if err != nil {
				t.Fatal(err)
			}
			var fast agentsilov1.PeerBatch
			err = fastBatch(wire, &fast)
			switch {
			case err == errSlow && c.slow:
			case err == errSlow:
				t.Fatalf("the codec's fast path does not read %s: it hands the batch to proto.Unmarshal", c.path)
			case err != nil:
				t.Fatalf("fast path: %v", err)
			case !proto.Equal(c.batch, &fast):
				t.Fatalf("the codec's fast path does not read %s:\n sent %v\n read %v", c.path, c.batch, &fast)
			}
			var viaCodec agentsilov1.PeerBatch
			if err := unmarshalBatch(wire, &viaCodec); err != nil || !proto.Equal(c.batch, &viaCodec) {
				t.Fatalf("codec Unmarshal: %v, %v", &viaCodec, err)
			}
		})
	}
	// The walk reaches what the codec writes by hand.
	for _, want := range []string{"PeerBatch.envelopes.message.idempotency_key", "PeerBatch.envelopes.not_run", "PeerBatch.hello.silo", "PeerBatch.envelopes.message.state"} {
		if !names[want] {
			t.Errorf("no case for %s", want)
		}
	}
}
