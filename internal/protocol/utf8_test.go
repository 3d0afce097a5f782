package protocol

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestCheckMessageCoversEveryString: CheckMessage finds a bad string in
// every string field of AgentMessage (a field added later without a check
// fails here), and agrees with CheckUTF8.
func TestCheckMessageCoversEveryString(t *testing.T) {
	fields := (&agentsilov1.AgentMessage{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		m := &agentsilov1.AgentMessage{}
		r := m.ProtoReflect()
		bad := protoreflect.ValueOfString("\xff")
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			r.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), bad)
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			r.Mutable(fd).List().Append(bad)
		case fd.Kind() == protoreflect.StringKind:
			r.Set(fd, bad)
		default:
			continue
		}
		if err := CheckMessage(m); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("a bad %s: CheckMessage = %v, want InvalidArgument", fd.Name(), err)
		}
		if err := CheckUTF8(m); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("a bad %s: CheckUTF8 = %v, want InvalidArgument", fd.Name(), err)
		}
	}
	if err := CheckMessage(&agentsilov1.AgentMessage{Message: "héllo", State: map[string]string{"k": "v"}, Data: []byte{0xff}}); err != nil {
		t.Errorf("a good message: %v", err)
	}
}
