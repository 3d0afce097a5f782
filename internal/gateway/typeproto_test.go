package gateway

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TypeProto writes a type's name, description and skills (a skill's
// Sensitive with them), and nothing of its per-type settings; TypeInfoOf
// reads them back.
func TestTypeProto(t *testing.T) {
	ti := grain.TypeInfo{Name: "Planner", Description: "Plans trips.", MailboxSize: 10, Skills: []grain.Skill{
		{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "Planning"}, Examples: []string{"plan a trip to Rome"}, InputSchema: []byte(`{"type":"object"}`)},
		{Name: "book", Tags: []string{"travel"}, Sensitive: true, Approval: true, Interleave: true},
	}}
	want := &agentsilov1.AgentType{Name: "Planner", Description: "Plans trips.", Skills: []*agentsilov1.Skill{
		{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "Planning"}, Examples: []string{"plan a trip to Rome"}, InputSchema: `{"type":"object"}`},
		{Name: "book", Tags: []string{"travel"}, Sensitive: true},
	}}
	got := TypeProto(ti)
	if !proto.Equal(got, want) {
		t.Fatalf("TypeProto = %v\nwant %v", got, want)
	}
	b, err := proto.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	back := &agentsilov1.AgentType{}
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	ti.MailboxSize = 0
	ti.Skills[1].Approval, ti.Skills[1].Interleave = false, false
	if read := TypeInfoOf(back); !reflect.DeepEqual(read, ti) {
		t.Fatalf("TypeInfoOf = %+v\nwant %+v", read, ti)
	}
}
