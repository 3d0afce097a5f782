package main

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsilo/agentsilo/client"
)

// fillStruct sets every field of the struct v points to (nested structs,
// slices of one element and pointers included) to a value that is not
// zero.
func fillStruct(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type() == reflect.TypeFor[*client.Message]() {
			v.Set(reflect.ValueOf(&client.Message{Message: "x"}))
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillStruct(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			return
		}
		for i := range v.NumField() {
			fillStruct(v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillStruct(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	}
}

func filled[T any]() T {
	var v T
	fillStruct(reflect.ValueOf(&v).Elem())
	return v
}

// hasAll reports the fields of m (and of the messages it holds) that are
// not set.
func hasAll(t *testing.T, where string, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			t.Errorf("%s: %s.%s is not set", where, m.Descriptor().Name(), fd.Name())
			continue
		}
		if fd.Message() == nil || fd.IsMap() || fd.Message().FullName() == "agentsilo.v1.AgentMessage" ||
			fd.Message().ParentFile().Package() == "google.protobuf" {
			continue
		}
		if fd.IsList() {
			hasAll(t, where, m.Get(fd).List().Get(0).Message())
		} else {
			hasAll(t, where, m.Get(fd).Message())
		}
	}
}

// TestWireTypesCarryEveryField: the SDK's values, every field set, turn
// into wire messages with every field set, so -o json prints all that the
// gateway sent (client's TestTypesCarryEveryField checks the other way).
func TestWireTypesCarryEveryField(t *testing.T) {
	for name, m := range map[string]proto.Message{
		"agents":        wireAgents([]client.AgentInfo{filled[client.AgentInfo]()})[0],
		"members":       wireMembers([]client.Member{filled[client.Member]()})[0],
		"reminders":     wireReminders([]client.Reminder{filled[client.Reminder]()})[0],
		"types":         wireTypes([]client.AgentType{filled[client.AgentType]()})[0],
		"rules":         wireRules([]client.ACLRule{filled[client.ACLRule]()})[0],
		"decision":      wireDecision(filled[client.Decision]()),
		"hits":          wireHits([]client.DirectoryHit{filled[client.DirectoryHit]()})[0],
		"entries":       wireEntries([]client.DirectoryEntry{filled[client.DirectoryEntry]()})[0],
		"subscriptions": wireSubscriptions([]client.Subscription{filled[client.Subscription]()})[0],
		"deadletters":   wireDeadLetters([]client.DeadLetter{filled[client.DeadLetter]()})[0],
	} {
		hasAll(t, name, m.ProtoReflect())
	}
}
