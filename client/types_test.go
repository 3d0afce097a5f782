package client

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestTypesCarryEveryField: each SDK type, converted from a wire message
// whose every field is set, has every field set, and has as many fields as
// the message: a field added to the wire and not to the SDK, or dropped by
// a conversion, fails here.
func TestTypesCarryEveryField(t *testing.T) {
	full := func(m proto.Message) proto.Message { testutil.FillProto(t, m.ProtoReflect()); return m }
	cases := []struct {
		wire proto.Message
		sdk  func(proto.Message) any
	}{
		{&agentsilov1.ActivationInfo{}, func(m proto.Message) any {
			return agentInfos([]*agentsilov1.ActivationInfo{m.(*agentsilov1.ActivationInfo)})[0]
		}},
		{&agentsilov1.Member{}, func(m proto.Message) any { return members([]*agentsilov1.Member{m.(*agentsilov1.Member)})[0] }},
		{&agentsilov1.ReminderInfo{}, func(m proto.Message) any {
			return reminders([]*agentsilov1.ReminderInfo{m.(*agentsilov1.ReminderInfo)})[0]
		}},
		{&agentsilov1.AgentType{}, func(m proto.Message) any { return agentTypes([]*agentsilov1.AgentType{m.(*agentsilov1.AgentType)})[0] }},
		{&agentsilov1.Skill{}, func(m proto.Message) any { return skills([]*agentsilov1.Skill{m.(*agentsilov1.Skill)})[0] }},
		{&agentsilov1.AclRule{}, func(m proto.Message) any { return *aclRule(m.(*agentsilov1.AclRule)) }},
		{&agentsilov1.DirectoryEntry{}, func(m proto.Message) any { return directoryEntry(m.(*agentsilov1.DirectoryEntry)) }},
		{&agentsilov1.Subscription{}, func(m proto.Message) any { return subscription(m.(*agentsilov1.Subscription)) }},
		{&agentsilov1.DeadLetter{}, func(m proto.Message) any { return deadLetter(m.(*agentsilov1.DeadLetter)) }},
	}
	for _, c := range cases {
		name := string(c.wire.ProtoReflect().Descriptor().Name())
		v := reflect.ValueOf(c.sdk(full(c.wire)))
		if n, want := v.NumField(), c.wire.ProtoReflect().Descriptor().Fields().Len(); n != want {
			t.Errorf("%s: the SDK's %s has %d fields, the wire's %d", name, v.Type(), n, want)
		}
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("%s: %s.%s is not set from the wire", name, v.Type(), v.Type().Field(i).Name)
			}
		}
	}
}

// TestWireCarriesEveryField: what the SDK sends (an ACL rule, an outside
// entry's skills) sets every field of the wire message.
func TestWireCarriesEveryField(t *testing.T) {
	rule := ACLRule{ID: 1, OwnerPattern: "o", AgentPattern: "a", CallerPattern: "c", Permission: "Read"}
	sk := Skill{Name: "n", Description: "d", Tags: []string{"t"}, Examples: []string{"e"}, InputSchema: "{}", OutputSchema: "{}", Sensitive: true}
	for _, m := range []proto.Message{rule.wire(), skillsToWire([]Skill{sk})[0]} {
		r := m.ProtoReflect()
		fields := r.Descriptor().Fields()
		for i := range fields.Len() {
			if !r.Has(fields.Get(i)) {
				t.Errorf("%s.%s is not set", r.Descriptor().Name(), fields.Get(i).Name())
			}
		}
	}
}
