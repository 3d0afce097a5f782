package mcp

import (
	"bytes"
	"encoding/json"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// request is what a tool call asks of an agent.
type request struct {
	agent grain.Address
	// data is the JSON arguments for a skill with an input schema, text
	// the message for one without.
	data []byte
	text string
	// session asks the agent of the MCP session's context (sessionArg).
	session bool
}

// inputCheck checks the JSON arguments of a request for a skill against
// its input schema, as the runtime will (grain.Registry.ValidateInput).
type inputCheck func(typeName, skill string, data []byte) error

// decodeArgs reads the arguments of a call of t: on the every-agent
// endpoint (agent zero) the agent argument names the agent, and is taken
// out; what is left must match t's input schema (checked by check, the
// registry's own check, if given; by t's compiled schema otherwise).
// Every error is InvalidArgument and says what is wrong.
func decodeArgs(t *tool, agent grain.Address, raw json.RawMessage, check inputCheck) (*request, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errs.New(codes.InvalidArgument, "tool %s: the arguments are not a JSON object", t.name)
	}
	r := &request{agent: agent, data: raw}
	if agent.Type == "" {
		v, ok := m[agentArg]
		if !ok {
			return nil, errs.New(codes.InvalidArgument, "tool %s: argument %q missing: the agent to ask, owner:alias (e.g. dev:e1)", everyAgentName(t.typ, t.name), agentArg)
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: argument %q: want a string, owner:alias", everyAgentName(t.typ, t.name), agentArg)
		}
		a, err := agentOf(t.typ, s)
		if err != nil {
			return nil, err
		}
		r.agent = a
		delete(m, agentArg)
		if r.data, err = json.Marshal(m); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: arguments: %w", t.name, err)
		}
	}
	if check != nil && !t.text {
		if err := check(t.typ, t.skill, r.data); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: %s", t.name, messageOf(err))
		}
	} else {
		var inst any
		if err := json.Unmarshal(r.data, &inst); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: arguments: %w", t.name, err)
		}
		if err := t.in.Validate(inst); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: the arguments do not match its input schema: %s", t.name, clip(err.Error(), 500))
		}
	}
	if t.text {
		var a struct {
			Message string `json:"message"`
			Session bool   `json:"session"`
		}
		if err := json.Unmarshal(r.data, &a); err != nil {
			return nil, errs.New(codes.InvalidArgument, "tool %s: argument %q: want a string", t.name, "message")
		}
		r.text, r.data, r.session = a.Message, nil, a.Session && t.session
	}
	return r, nil
}

// agentOf parses the agent argument, owner:alias, of a tool of type typ.
func agentOf(typ, s string) (grain.Address, error) {
	owner, alias, ok := strings.Cut(s, ":")
	if !ok || strings.Contains(alias, ":") {
		return grain.Address{}, errs.New(codes.InvalidArgument, "argument %q %q: want owner:alias (e.g. dev:e1)", agentArg, protocol.Clip(s))
	}
	a, err := grain.ParseAddress(typ + ":" + owner + ":" + alias)
	if err != nil {
		return grain.Address{}, errs.New(codes.InvalidArgument, "argument %q: %s", agentArg, messageOf(err))
	}
	return a, nil
}
