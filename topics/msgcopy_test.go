package topics

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// copyMessage copies every field the message type declares (a field added
// to it and not to copyMessage fails here), deeply: changing the copy's
// bytes, files, state or deadline leaves the original as it was.
func TestCopyMessageCopiesEveryField(t *testing.T) {
	m := &agentsilov1.AgentMessage{}
	r := m.ProtoReflect()
	testutil.FillProto(t, r)
	r.SetUnknown(protoreflect.RawFields{0xf8, 0x01, 0x01}) // field 31, varint 1
	c := copyMessage(m)
	if !proto.Equal(c, m) {
		t.Fatalf("copy differs:\n%v\n%v", c, m)
	}
	orig := proto.Clone(m)
	c.Data[0]++
	c.Files[0] = "g"
	for k := range c.State {
		c.State[k] = "w"
	}
	c.Deadline.Seconds++
	if !proto.Equal(m, orig) {
		t.Fatalf("the copy shares its parts with the original: %v", m)
	}
	if c := copyMessage(nil); c == nil || !proto.Equal(c, &agentsilov1.AgentMessage{}) {
		t.Fatalf("a copy of nil: %v", c)
	}
}
