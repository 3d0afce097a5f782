package grain

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

type tripIn struct {
	City   string   `json:"city" jsonschema:"the city to plan a trip to"`
	Days   int      `json:"days"`
	Budget float64  `json:"budget,omitempty"`
	Tags   []string `json:"tags,omitempty"`
}

type tripOut struct {
	Plan  []string `json:"plan"`
	Total float64  `json:"total"`
}

// schemaProps reads a JSON Schema's type, properties and required list.
func schemaProps(t *testing.T, raw json.RawMessage) (typ string, props map[string]json.RawMessage, required []string) {
	t.Helper()
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	return s.Type, s.Properties, s.Required
}

func TestTypedSkillSchemas(t *testing.T) {
	sk := TypedSkill[tripIn, tripOut]("plan", "Plans a trip.", "travel")
	if sk.Name != "plan" || sk.Description != "Plans a trip." || len(sk.Tags) != 1 || sk.Tags[0] != "travel" {
		t.Fatalf("skill = %+v", sk)
	}
	typ, props, req := schemaProps(t, sk.InputSchema)
	if typ != "object" || len(props) != 4 || strings.Join(req, ",") != "city,days" {
		t.Fatalf("input schema %s: type %q, %d properties, required %v", sk.InputSchema, typ, len(props), req)
	}
	if !strings.Contains(string(props["city"]), "the city to plan a trip to") {
		t.Errorf("city property %s lacks its description", props["city"])
	}
	typ, props, req = schemaProps(t, sk.OutputSchema)
	if typ != "object" || len(props) != 2 || strings.Join(req, ",") != "plan,total" {
		t.Fatalf("output schema %s: type %q, %d properties, required %v", sk.OutputSchema, typ, len(props), req)
	}
	if any := TypedSkill[tripIn, any]("x", ""); len(any.OutputSchema) != 0 || len(any.InputSchema) == 0 {
		t.Errorf("TypedSkill[tripIn, any]: output schema %s, input %s; want none, one", any.OutputSchema, any.InputSchema)
	}

	reg := NewRegistry()
	if err := reg.Register("Planner", echoFactory, TypeInfo{Skills: []Skill{sk, {Name: "chat"}}}); err != nil {
		t.Fatal(err)
	}
	info, _ := reg.Info("Planner")
	if string(info.Skills[0].InputSchema) != string(sk.InputSchema) || string(info.Skills[0].OutputSchema) != string(sk.OutputSchema) {
		t.Fatal("Info lost the schemas")
	}
}

func TestRegisterRefusesBadSchemas(t *testing.T) {
	for name, sk := range map[string]Skill{
		"array input":        {Name: "s", InputSchema: json.RawMessage(`[1]`)},
		"null input":         {Name: "s", InputSchema: json.RawMessage(`null`)},
		"not JSON":           {Name: "s", InputSchema: json.RawMessage(`{`)},
		"string output":      {Name: "s", OutputSchema: json.RawMessage(`"object"`)},
		"unresolvable":       {Name: "s", InputSchema: json.RawMessage(`{"$ref":"https://example.com/s.json"}`)},
		"bad keyword value":  {Name: "s", InputSchema: json.RawMessage(`{"type":5}`)},
		"no schema for chan": TypedSkill[chan int, any]("s", ""),
		"no schema for func": TypedSkill[tripIn, func()]("s", ""),
	} {
		err := NewRegistry().Register("T", echoFactory, TypeInfo{Skills: []Skill{sk}})
		if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `skill "s"`) {
			t.Errorf("%s: Register = %v, want InvalidArgument naming the skill", name, err)
		}
	}
}

func TestValidateInput(t *testing.T) {
	reg := NewRegistry()
	if err := reg.ValidateInput("Planner", "plan", []byte(`garbage`)); err != nil {
		t.Fatalf("no types: %v", err)
	}
	if err := reg.Register("Plain", echoFactory, TypeInfo{Skills: []Skill{{Name: "plan"}}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.ValidateInput("Plain", "plan", []byte(`garbage`)); err != nil {
		t.Fatalf("no schemas: %v", err)
	}
	if err := reg.Register("Planner", echoFactory, TypeInfo{Skills: []Skill{TypedSkill[tripIn, tripOut]("plan", "")}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ, skill, data string
		want             string // a part of the error; "" for none
	}{
		{"Planner", "plan", `{"city":"Rome","days":3}`, ""},
		{"Planner", "plan", ` {"city":"Rome","days":3,"budget":1.5,"tags":["art"]} `, ""},
		{"Planner", "plan", `{"city":"Rome"}`, "do not match its input schema"},
		{"Planner", "plan", `{"city":"Rome","days":"three"}`, "do not match its input schema"},
		{"Planner", "plan", `{"city":"Rome","days":2.5}`, "do not match its input schema"},
		{"Planner", "plan", `{"city":"Rome","days":3,"extra":1}`, "do not match its input schema"},
		{"Planner", "plan", `[1,2]`, "do not match its input schema"},
		{"Planner", "plan", ``, "do not match its input schema"}, // {} lacks city and days
		{"Planner", "plan", `{"city":"Rome","days":3} {}`, "not JSON"},
		{"Planner", "plan", `{"city":`, "not JSON"},
		{"Planner", "other", `garbage`, ""}, // no such skill: not a typed call
		{"Plain", "plan", `garbage`, ""},
		{"Nobody", "plan", `garbage`, ""},
	} {
		err := reg.ValidateInput(tc.typ, tc.skill, []byte(tc.data))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s/%s %q: %v, want nil", tc.typ, tc.skill, tc.data, err)
		case tc.want != "" && (errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s/%s %q: %v, want InvalidArgument with %q", tc.typ, tc.skill, tc.data, err, tc.want)
		}
	}
}

func TestDecodeAndJSONReply(t *testing.T) {
	m := &Message{ID: "1", MessageType: "plan", DataType: "application/json; charset=utf-8", Data: []byte(`{"city":"Rome","days":3}`)}
	in, err := Decode[tripIn](m)
	if err != nil || in.City != "Rome" || in.Days != 3 {
		t.Fatalf("Decode = %+v, %v", in, err)
	}
	// JSON Schema's integers include 3.0 and 1e2; so do Decode's.
	if in, err := Decode[tripIn](&Message{Data: []byte(`{"city":"Rome","days":3.0,"budget":1e2}`)}); err != nil || in.Days != 3 || in.Budget != 100 {
		t.Fatalf("Decode of integral numbers = %+v, %v", in, err)
	}
	if in, err := Decode[tripIn](&Message{Data: []byte(`{"city":"Rome","days":1e2}`)}); err != nil || in.Days != 100 {
		t.Fatalf("Decode of 1e2 = %+v, %v", in, err)
	}
	if _, err := Decode[tripIn](&Message{Data: []byte(`{"city":"Rome","days":2.5}`)}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("Decode of 2.5 days = %v, want InvalidArgument", err)
	}
	if _, err := Decode[tripIn](&Message{Data: []byte(`{"city":"Rome","days":1e999999999}`)}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("Decode of 1e999999999 days = %v, want InvalidArgument", err)
	}
	if in, err := Decode[tripIn](&Message{}); err != nil || in.City != "" {
		t.Fatalf("Decode of no data = %+v, %v; want the zero value", in, err)
	}
	for name, bad := range map[string]*Message{
		"text data":     {MessageType: "plan", DataType: "text/plain", Data: []byte(`{"city":"Rome"}`)},
		"unknown field": {MessageType: "plan", Data: []byte(`{"city":"Rome","nights":2}`)},
		"wrong type":    {MessageType: "plan", Data: []byte(`{"days":"3"}`)},
		"trailing data": {MessageType: "plan", Data: []byte(`{} []`)},
		"not JSON":      {MessageType: "plan", Data: []byte(`city=Rome`)},
	} {
		if _, err := Decode[tripIn](bad); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "skill plan") {
			t.Errorf("%s: Decode = %v, want InvalidArgument naming the skill", name, err)
		}
	}
	r, err := JSONReply(m, tripOut{Plan: []string{"Colosseum"}, Total: 12})
	if err != nil || r.Kind != KindResponse || r.DataType != JSONType || string(r.Data) != `{"plan":["Colosseum"],"total":12}` {
		t.Fatalf("JSONReply = %v, %v", r, err)
	}
	if _, err := JSONReply(m, func() {}); errs.Code(err) != codes.Internal {
		t.Fatalf("JSONReply of a func = %v, want Internal", err)
	}
}

// A typed agent in a runtime: TypedHandler decodes the request and encodes
// its reply; its error reaches the caller as it is.
func TestTypedHandlerInRuntime(t *testing.T) {
	var runs atomic.Int32
	plan := TypedHandler(func(_ context.Context, in tripIn) (tripOut, error) {
		runs.Add(1)
		if in.Days > 30 {
			return tripOut{}, errs.New(codes.OutOfRange, "%d days is too long", in.Days)
		}
		out := tripOut{Total: float64(in.Days) * 100}
		for range in.Days {
			out.Plan = append(out.Plan, in.City)
		}
		return out, nil
	})
	reg := NewRegistry()
	err := reg.Register("Planner", func(Host) (Agent, error) {
		return &funcAgent{onMessage: plan}, nil
	}, TypeInfo{Skills: []Skill{TypedSkill[tripIn, tripOut]("plan", "")}})
	if err != nil {
		t.Fatal(err)
	}
	rt := startRuntime(t, DefaultConfig(), reg)
	ask := func(data string) (*Message, error) {
		return rt.Ask(t.Context(), &Message{To: "Planner:acme:a", MessageType: "plan", DataType: JSONType, Data: []byte(data)})
	}
	r, err := ask(`{"city":"Rome","days":2}`)
	if err != nil {
		t.Fatal(err)
	}
	var out tripOut
	if err := json.Unmarshal(r.Data, &out); err != nil || r.DataType != JSONType || out.Total != 200 || len(out.Plan) != 2 || out.Plan[1] != "Rome" {
		t.Fatalf("reply %+v: %+v, %v", r, out, err)
	}
	if _, err := ask(`{"city":"Rome","days":31}`); errs.Code(err) != codes.OutOfRange {
		t.Fatalf("too long: %v, want OutOfRange", err)
	}
	if runs.Load() != 2 {
		t.Fatalf("the agent ran %d times, want 2", runs.Load())
	}
	// Arguments that do not match the schema are refused before the agent runs.
	for _, bad := range []string{`{"city":"Rome","days":"two"}`, `{"city":"Rome"}`, ``, `{"city":"Rome","days":2,"x":0}`} {
		if _, err := ask(bad); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "skill plan of Planner") {
			t.Fatalf("Ask with %q: %v, want InvalidArgument from the schema", bad, err)
		}
		err := rt.Send(t.Context(), &Message{To: "Planner:acme:a", MessageType: "plan", DataType: JSONType, Data: []byte(bad)})
		if errs.Code(err) != codes.InvalidArgument {
			t.Fatalf("Send with %q: %v, want InvalidArgument", bad, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("the agent ran %d times for refused arguments", runs.Load()-2)
	}
	// Another message type of the same agent is not a typed call.
	if _, err := rt.Ask(t.Context(), &Message{To: "Planner:acme:a", MessageType: "chat", Data: []byte(`hi`)}); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "do not decode") {
		t.Fatalf("untyped message: %v, want the agent's own InvalidArgument", err)
	}
}

// FuzzTypedInput feeds arbitrary data to the schema check and the decoder
// of a typed skill: neither may panic, and what the schema accepts decodes.
func FuzzTypedInput(f *testing.F) {
	for _, s := range []string{
		`{"city":"Rome","days":3}`, `{"city":"Rome","days":3,"budget":2.5,"tags":["a","b"]}`,
		`{"city":"Rome","days":1e2}`, `{"city":"Rome","days":3,"tags":null}`, `{"City":"Rome","days":3}`,
		`{"city":"Rome","days":3,"city":"Oslo"}`, `{"city":"\u00e9","days":-0}`, ``, `null`, `[]`, `{`, `"x"`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	type in struct {
		City   string   `json:"city"`
		Days   int32    `json:"days"`
		Budget float64  `json:"budget,omitempty"`
		Tags   []string `json:"tags,omitempty"`
	}
	reg := NewRegistry()
	if err := reg.Register("T", echoFactory, TypeInfo{Skills: []Skill{TypedSkill[in, any]("s", "")}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		verr := reg.ValidateInput("T", "s", data)
		v, derr := Decode[in](&Message{MessageType: "s", Data: data})
		if verr != nil && errs.Code(verr) != codes.InvalidArgument {
			t.Fatalf("ValidateInput: %v, want nil or InvalidArgument", verr)
		}
		if derr != nil && errs.Code(derr) != codes.InvalidArgument {
			t.Fatalf("Decode: %v, want nil or InvalidArgument", derr)
		}
		// A number the schema takes may be out of the Go field's range.
		if verr == nil && derr != nil && !strings.Contains(derr.Error(), "cannot unmarshal number") {
			t.Fatalf("the schema accepts %q but it does not decode: %v", data, derr)
		}
		_ = v
	})
}

// BenchmarkValidateInput: the schema check of a typed skill's arguments,
// and the check of a message for a type without schemas.
func BenchmarkValidateInput(b *testing.B) {
	reg := NewRegistry()
	if err := reg.Register("Planner", echoFactory, TypeInfo{Skills: []Skill{TypedSkill[tripIn, tripOut]("plan", "")}}); err != nil {
		b.Fatal(err)
	}
	typed := &Message{To: "Planner:acme:a", MessageType: "plan", Data: []byte(`{"city":"Rome","days":3,"budget":120.5,"tags":["art","food"]}`)}
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := reg.validateMessage(typed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("untyped-type", func(b *testing.B) {
		m := &Message{To: "Echo:acme:a", MessageType: "chat", Data: []byte(`hi`)}
		b.ReportAllocs()
		for b.Loop() {
			if err := reg.validateMessage(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no-typed-types", func(b *testing.B) {
		empty := NewRegistry()
		b.ReportAllocs()
		for b.Loop() {
			if err := empty.validateMessage(typed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
