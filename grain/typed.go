package grain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Typed skills: a skill whose input and output are Go types. TypedSkill
// derives the skill's JSON Schemas from them; the same declaration then
// serves every way the skill is called:
//
//   - the Ask API: a request for the skill carries message_type = the
//     skill's name, data_type "application/json" and the JSON arguments as
//     data; the gateway checks them against the input schema
//     (Registry.ValidateInput) and refuses what does not match with
//     InvalidArgument before any agent runs; Decode and JSONReply (or
//     TypedHandler) are the agent's side, AskTyped the caller's (from a
//     turn, with its Host, or from a program, with a client.Client);
//   - the A2A card: the skill's input and output modes, with its schemas;
//   - MCP: the tool's input and output schemas.
//
// The calling convention in short: message_type = skill name, data_type =
// JSONType, data = the JSON arguments (an empty data counts as {}).

// JSONType is the data type of typed skills' arguments and replies.
const JSONType = "application/json"

// TypedSkill returns a skill named name whose input is a JSON value of
// type In and whose replies carry a JSON value of type Out, with the JSON
// Schemas of both (github.com/google/jsonschema-go's inference: a struct's
// exported fields are its properties, required unless tagged omitempty or
// omitzero; a `jsonschema:"..."` field tag is the property's description;
// other properties are refused). In should be a struct (or a map with
// string keys): tools of MCP take a JSON object. Use any as Out for a skill
// whose replies have no schema. Tags name keywords to find the skill by.
//
// A type the schema cannot be inferred from (a channel, a func, a cycle)
// makes Register fail with InvalidArgument naming the skill.
func TypedSkill[In, Out any](name, description string, tags ...string) Skill {
	sk := Skill{Name: name, Description: description, Tags: tags}
	in, err := schemaOf[In]()
	if err != nil {
		sk.schemaErr = fmt.Errorf("input type: %w", err)
		return sk
	}
	sk.InputSchema = in
	var z *Out
	if _, isAny := any(z).(*any); isAny {
		return sk
	}
	out, err := schemaOf[Out]()
	if err != nil {
		sk.schemaErr = fmt.Errorf("output type: %w", err)
		return sk
	}
	sk.OutputSchema = out
	return sk
}

// schemaOf is the JSON Schema of T, as JSON.
func schemaOf[T any]() (json.RawMessage, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// compileSchema resolves raw, a JSON Schema, for validation.
func compileSchema(raw json.RawMessage) (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// ValidateInput checks data, the JSON arguments of a request for skill of
// typeName (its message_type), against the skill's InputSchema: nil if
// they match, or if the type is not registered here or the skill declares
// no input schema (a message_type that names no skill included); else
// InvalidArgument saying what does not match. Empty data counts as {}.
//
// Runtime.Ask and Runtime.Send call it for every message from outside the
// runtime (the gateway's, the A2A and MCP servers'): arguments that do not
// match never reach an agent. A server that answers a refused call
// otherwise than a failed one (MCP: a protocol error instead of a tool
// error) calls it first itself. It costs one atomic load while no
// registered type declares an input schema.
func (r *Registry) ValidateInput(typeName, skill string, data []byte) error {
	if r.typed.Load() == 0 {
		return nil
	}
	e := r.lookup(typeName)
	if e == nil || e.inputs == nil {
		return nil
	}
	rs := e.inputs[skill]
	if rs == nil {
		return nil
	}
	return validateJSON(rs, typeName, skill, data)
}

// validateMessage is ValidateInput for a message from outside the runtime
// (Runtime.Ask and Send): its type is the first part of its address.
func (r *Registry) validateMessage(m *Message) error {
	if r.typed.Load() == 0 || m.MessageType == "" {
		return nil
	}
	typ, _, _ := strings.Cut(m.To, ":")
	return r.ValidateInput(typ, m.MessageType, m.Data)
}

// validateJSON checks data (JSON; empty is {}) against rs.
func validateJSON(rs *jsonschema.Resolved, typeName, skill string, data []byte) error {
	var v any
	if len(bytes.TrimSpace(data)) == 0 {
		v = map[string]any{}
	} else if err := json.Unmarshal(data, &v); err != nil { // one value, nothing after it
		return errs.New(codes.InvalidArgument, "skill %s of %s: the arguments are not JSON: %w", clip(skill), typeName, err)
	}
	if err := rs.Validate(v); err != nil {
		return errs.New(codes.InvalidArgument, "skill %s of %s: the arguments do not match its input schema: %s", clip(skill), typeName, clipLong(err.Error()))
	}
	return nil
}

// unmarshalOne decodes exactly one JSON value of data into v (no trailing
// data), numbers as float64 or, if strict, into v's Go types with unknown
// object fields refused.
func unmarshalOne(data []byte, v any, strict bool) error {
	d := json.NewDecoder(bytes.NewReader(data))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// Decode decodes the JSON arguments of a typed skill's request into an In:
// msg's data (empty data gives In's zero value), which must be JSON
// (data_type application/json, or +json, or none) of In's shape, with no
// unknown object fields. Anything else is InvalidArgument, for the agent
// to return to its caller as it is.
func Decode[In any](msg *Message) (In, error) {
	var in In
	if dt := msg.DataType; dt != "" && !isJSONType(dt) {
		return in, errs.New(codes.InvalidArgument, "%s: data of type %q, want %s", what(msg), clip(dt), JSONType)
	}
	data := msg.Data
	if len(bytes.TrimSpace(data)) == 0 {
		return in, nil
	}
	err := unmarshalOne(data, &in, true)
	if ute := (*json.UnmarshalTypeError)(nil); errors.As(err, &ute) && strings.HasPrefix(ute.Value, "number") {
		// JSON Schema's integers include 3.0 and 1e2, which encoding/json
		// does not put in an int: write them as integers and decode again.
		if norm, ok := integralNumbers(data); ok {
			in = *new(In)
			err = unmarshalOne(norm, &in, true)
		}
	}
	if err != nil {
		return in, errs.New(codes.InvalidArgument, "%s: the arguments do not decode as %T: %s", what(msg), in, clipLong(err.Error()))
	}
	return in, nil
}

// integralNumbers rewrites data's numbers that have a fraction or an
// exponent but an integral value within ±2^53 (3.0, 1e2) as integers; ok
// is false if data is not JSON.
func integralNumbers(data []byte) ([]byte, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	b, err := json.Marshal(integral(v))
	return b, err == nil
}

func integral(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = integral(e)
		}
	case []any:
		for i, e := range x {
			x[i] = integral(e)
		}
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") {
			return x
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return json.Number(strconv.FormatInt(int64(f), 10))
		}
	}
	return v
}

// clipLong shortens an error's text to 500 bytes (at a rune's start): a
// schema's complaint names the path and the values, which are the caller's.
func clipLong(s string) string {
	const n = 500
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// what names a message in Decode's errors: its message type, if any.
func what(msg *Message) string {
	if t := msg.MessageType; t != "" {
		return "skill " + clip(t)
	}
	return "request"
}

// JSONReply returns the reply to req whose data is out as JSON (data_type
// application/json). An out that does not encode is Internal.
func JSONReply[Out any](req *Message, out Out) (*Message, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, errs.New(codes.Internal, "the turn ran, but its reply (%T) does not encode as JSON: %w", out, err)
	}
	r := req.Response()
	r.Data, r.DataType = b, JSONType
	return r, nil
}

// TypedHandler adapts f to an agent's OnMessage for one typed skill: the
// request's arguments decoded into an In (Decode), f's result encoded as
// the JSON reply (JSONReply). f's error is returned as it is. An agent with
// several skills dispatches on msg.MessageType to one TypedHandler each:
//
//	plan := grain.TypedHandler(a.plan)
//	func (a *agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
//		switch m.MessageType {
//		case "plan":
//			return plan(ctx, m)
//		}
//		...
//	}
func TypedHandler[In, Out any](f func(ctx context.Context, in In) (Out, error)) func(context.Context, *Message) (*Message, error) {
	return func(ctx context.Context, m *Message) (*Message, error) {
		in, err := Decode[In](m)
		if err != nil {
			return nil, err
		}
		out, err := f(ctx, in)
		if err != nil {
			return nil, err
		}
		return JSONReply(m, out)
	}
}

// isJSONType reports whether a data type is JSON: application/json or
// anything/anything+json, with any parameters.
func isJSONType(dataType string) bool {
	mt, _, err := mime.ParseMediaType(dataType)
	if err != nil {
		return false
	}
	return mt == JSONType || strings.HasSuffix(mt, "+json")
}

// Asker asks an agent and waits for its reply: the Host of an agent's
// turn is one, and so is a Go SDK client (*client.Client), so AskTyped
// serves both.
type Asker interface {
	Ask(ctx context.Context, to string, msg *Message) (*Message, error)
}

// AskTyped asks the agent at to (absolute, or relative to the asker's
// owner) for its typed skill named skill: in, as JSON, is the request's
// data (message_type = skill, data_type application/json), and the
// reply's JSON data is decoded into an Out. From an agent's turn:
//
//	out, err := grain.AskTyped[PlanIn, PlanOut](ctx, host, "Planner:trips", "plan", PlanIn{City: "Rome", Days: 3})
//
// Where the arguments are checked against the skill's input schema: the
// gateway (and so the SDK), A2A and MCP refuse those that do not match
// with InvalidArgument before the agent runs; an Ask from an agent's turn
// is not checked on its way, and the callee's Decode (or TypedHandler)
// refuses what does not decode into its In. A reply without JSON data, or
// whose data does not decode as an Out, is Internal, saying the turn ran.
func AskTyped[In, Out any](ctx context.Context, a Asker, to, skill string, in In) (Out, error) {
	var out Out
	data, err := json.Marshal(in)
	if err != nil {
		return out, errs.New(codes.InvalidArgument, "skill %s: encode the arguments (%T) as JSON: %w (not sent, so it did not run)", skill, in, err)
	}
	r, err := a.Ask(ctx, to, &Message{MessageType: skill, DataType: JSONType, Data: data})
	if err != nil {
		return out, err
	}
	if len(r.Data) == 0 {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply has no JSON data (text %q)", skill, to, clip(r.Message))
	}
	if dt := r.DataType; dt != "" && !isJSONType(dt) {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply's data is %s, not JSON", skill, to, dt)
	}
	if err := json.Unmarshal(r.Data, &out); err != nil {
		return out, errs.New(codes.Internal, "skill %s of %s: the turn ran, but the reply does not decode as %T: %w", skill, to, out, err)
	}
	return out, nil
}
