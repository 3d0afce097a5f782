// Package mcptest holds agent types that exercise the MCP mapping, for
// the tests of package mcp, the TypeScript and Inspector tests in
// tests/mcpjs and the figures of tests/mcpbench:
//
//   - Add has a skill with JSON input and output schemas: it replies
//     {"sum": a+b} as application/json data.
//   - Slow pushes "started" to its caller, then waits until its context
//     ends (a cancellation, the call's timeout) and reports that on
//     Ended; RanOn says which silo ran it.
//   - Fail returns the gRPC code its text names ("NotFound", ...).
package mcptest

import (
	"context"
	"encoding/json"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// AddInput and AddOutput are the JSON Schemas of Add's skill "add".
const (
	AddInput  = `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}`
	AddOutput = `{"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]}`
)

// Register adds the test types to reg.
func Register(reg *grain.Registry) error {
	types := []struct {
		name string
		f    grain.Factory
		info grain.TypeInfo
	}{
		{"Add", func(grain.Host) (grain.Agent, error) { return Add{}, nil }, grain.TypeInfo{
			Description: "Adds two numbers.",
			Skills:      []grain.Skill{{Name: "add", Description: "returns a+b", InputSchema: json.RawMessage(AddInput), OutputSchema: json.RawMessage(AddOutput)}},
		}},
		{"Slow", func(h grain.Host) (grain.Agent, error) { return &Slow{h: h}, nil }, grain.TypeInfo{
			Description: "Works until it is cancelled.",
			Skills:      []grain.Skill{{Name: "wait", Description: "pushes started, then waits until cancelled"}},
		}},
		{"Fail", func(grain.Host) (grain.Agent, error) { return Fail{}, nil }, grain.TypeInfo{
			Description: "Fails as asked.",
			Skills:      []grain.Skill{{Name: "fail", Description: "fails with the gRPC code its message names"}},
		}},
	}
	for _, t := range types {
		if err := reg.Register(t.name, t.f, t.info); err != nil {
			return err
		}
	}
	return nil
}

// Add replies {"sum": a+b} to {"a": .., "b": ..}.
type Add struct{}

// OnMessage implements grain.Agent.
func (Add) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	var in struct{ A, B float64 }
	if err := json.Unmarshal(m.Data, &in); err != nil {
		return nil, errs.New(codes.InvalidArgument, "add: %w", err)
	}
	data, err := json.Marshal(map[string]float64{"sum": in.A + in.B})
	if err != nil {
		return nil, err
	}
	r := m.Response()
	r.DataType, r.Data = "application/json", data
	return r, nil
}

// Slow pushes "started" to its caller, then waits until its context ends
// and replies with the context's error.
type Slow struct{ h grain.Host }

var ended = struct {
	sync.Mutex
	m map[string]chan error
}{m: map[string]chan error{}}

// Ended delivers the context error of each turn of the Slow agent addr
// (Type:owner:alias) that ended, on any silo of this process.
func Ended(addr string) <-chan error { return endedChan(addr) }

func endedChan(addr string) chan error {
	ended.Lock()
	defer ended.Unlock()
	c := ended.m[addr]
	if c == nil {
		c = make(chan error, 16)
		ended.m[addr] = c
	}
	return c
}

var ranOn sync.Map // address -> the silo of its last Slow turn

// RanOn is the silo that ran the last turn of the Slow agent addr
// (Type:owner:alias) in this process, or "".
func RanOn(addr string) string {
	s, _ := ranOn.Load(addr)
	name, _ := s.(string)
	return name
}

// OnMessage implements grain.Agent.
func (a *Slow) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	ranOn.Store(a.h.Address().String(), a.h.Silo())
	// The push may reach the caller, and the caller cancel the turn,
	// before Send returns here: a Send that fails because the turn ended
	// is the end of the turn, reported on Ended like any other.
	if err := a.h.Send(ctx, m.From, grain.Text("started")); err != nil && ctx.Err() == nil {
		return nil, err
	}
	<-ctx.Done()
	c := endedChan(a.h.Address().String())
	select {
	case c <- ctx.Err():
	default:
	}
	code := codes.Canceled
	if ctx.Err() == context.DeadlineExceeded {
		code = codes.DeadlineExceeded
	}
	return nil, errs.Wrap(code, ctx.Err(), "slow")
}

// Fail returns the error code its text names, or replies "ok".
type Fail struct{}

// OnMessage implements grain.Agent.
func (Fail) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if c.String() == m.Message {
			return nil, errs.New(c, "failing with %s as asked", c)
		}
	}
	r := m.Response()
	r.Message = "ok"
	return r, nil
}
