package memory

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/client"
)

// The skills' schemas, written out in schema.go, name exactly the JSON
// fields of the client's types: an entry's (client.MemoryEntry), a
// query's (client.MemoryQuery), a request's (client.MemoryRequest, over
// the five inputs) and a reply's (client.MemoryReply, over the outputs).
func TestSkillSchemasMatchTypes(t *testing.T) {
	sk, err := skills()
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	props := func(raw json.RawMessage) map[string]json.RawMessage {
		t.Helper()
		var s schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		return s.Properties
	}
	names := func(m map[string]json.RawMessage) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	var inputs, outputs []string
	var put, list map[string]json.RawMessage
	for _, s := range sk {
		in, out := props(s.InputSchema), props(s.OutputSchema)
		inputs, outputs = append(inputs, names(in)...), append(outputs, names(out)...)
		switch s.Name {
		case client.MemoryPut:
			put = in
			if got, want := names(props(out["entry"])), fields[client.MemoryEntry](); !slices.Equal(got, want) {
				t.Errorf("the stored entry's properties %v, want %v", got, want)
			}
		case client.MemoryList:
			list = in
		}
	}
	for what, c := range map[string]struct{ got, want []string }{
		"a put's entry":  {names(props(put["entry"])), fields[client.MemoryEntry]()},
		"a list's query": {names(props(list["query"])), fields[client.MemoryQuery]()},
		"the requests":   {compact(inputs), fields[client.MemoryRequest]()},
		"the replies":    {compact(outputs), fields[client.MemoryReply]()},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: properties %v, want %v", what, c.got, c.want)
		}
	}
}

// fields are the JSON names of T's fields, sorted.
func fields[T any]() []string {
	var out []string
	rt := reflect.TypeFor[T]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func compact(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
