package gateway

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TypeProto writes a type's name, description and skills, and nothing of
// its per-type settings.
func TestTypeProto(t *testing.T) {
	ti := grain.TypeInfo{Name: "Planner", Description: "Plans trips.", MailboxSize: 10, Skills: []grain.Skill{
		{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "Planning"}, Examples: []string{"plan a trip to Rome"}, InputSchema: []byte(`{"type":"object"}`)},
		{Name: "book", Tags: []string{"travel"}},
	}}
	want := &agentsilov1.AgentType{Name: "Planner", Description: "Plans trips.", Skills: []*agentsilov1.Skill{
		{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "Planning"}, Examples: []string{"plan a trip to Rome"}, InputSchema: `{"type":"object"}`},
		{Name: "book", Tags: []string{"travel"}},
	}}
	if got := TypeProto(ti); !proto.Equal(got, want) {
		t.Fatalf("TypeProto = %v\nwant %v", got, want)
	}
}
