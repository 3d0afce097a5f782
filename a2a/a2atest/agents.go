// Package a2atest holds agent types that exercise every path of the A2A
// mapping, for the tests of package a2a, the multi-process tests in
// tests/a2a and the benchmark in tests/a2abench:
//
//   - Interview asks for input (TypeInputRequired) until it has a name,
//     and echoes the contextId it sees in its state.
//   - Fail returns the gRPC code named by its text ("NotFound", ...), or
//     replies of the message type named after "type " ("type rejected").
//   - Stream pushes artifact chunks (a2a.TypeArtifact) and progress to its
//     caller before replying.
//   - Block pushes "started" (unless its text is "quiet"), then waits
//     until its context ends (a cancel, the task timeout) or a message
//     "release" reaches Block:<owner>:gate.
//   - Skilled has a description and skills, for cards and the directory.
package a2atest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// These match package a2a's constants (a2atest does not import a2a, so
// that a silo program of its own links it alone).
const (
	stateContextID    = "a2a.context_id"
	stateTaskID       = "a2a.task_id"
	stateArtifactID   = "a2a.artifact_id"
	typeInputRequired = "input-required"
	typeArtifact      = "a2a.artifact"
)

// Register adds the test types to reg.
func Register(reg *grain.Registry) error {
	types := []struct {
		name string
		f    grain.Factory
		info grain.TypeInfo
	}{
		{"Interview", func(grain.Host) (grain.Agent, error) { return &Interview{}, nil }, grain.TypeInfo{}},
		{"Fail", func(grain.Host) (grain.Agent, error) { return Fail{}, nil }, grain.TypeInfo{}},
		{"Stream", func(h grain.Host) (grain.Agent, error) { return &Stream{h: h}, nil }, grain.TypeInfo{}},
		{"Block", func(h grain.Host) (grain.Agent, error) { return &Block{h: h}, nil }, grain.TypeInfo{}},
		{"Skilled", func(grain.Host) (grain.Agent, error) { return Fail{}, nil }, SkilledInfo},
	}
	for _, t := range types {
		if err := reg.Register(t.name, t.f, t.info); err != nil {
			return err
		}
	}
	return nil
}

// SkilledInfo is the metadata of the Skilled type.
var SkilledInfo = grain.TypeInfo{
	Description: "Plans trips.",
	Skills: []grain.Skill{
		{Name: "plan", Description: "Plans a trip.", Tags: []string{"travel", "planning"}, Examples: []string{"plan a trip to Rome"}},
		{Name: "book", Description: "Books a hotel.", Tags: []string{"travel"}},
	},
}

// Interview asks "what is your name?" until a message says "name X";
// then it replies "hello X (context C)", C the contextId in its state.
type Interview struct{ turns int }

// OnMessage implements grain.Agent.
func (a *Interview) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	a.turns++
	r := m.Response()
	if name, ok := strings.CutPrefix(m.Message, "name "); ok {
		r.Message = fmt.Sprintf("hello %s (context %s, turn %d)", name, m.State[stateContextID], a.turns)
		return r, nil
	}
	r.MessageType = typeInputRequired
	r.Message = "what is your name?"
	return r, nil
}

// Fail replies with the error code its text names ("Unavailable",
// "InvalidArgument", ...), or, for "type T", a reply of message type T.
type Fail struct{}

// OnMessage implements grain.Agent.
func (Fail) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	if t, ok := strings.CutPrefix(m.Message, "type "); ok {
		r := m.Response()
		r.MessageType = t
		r.Message = "because " + t
		return r, nil
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == m.Message && c != codes.OK {
			return nil, errs.New(c, "failing with %s as asked", c)
		}
	}
	r := m.Response()
	r.Message = "ok"
	return r, nil
}

// Stream pushes N (its text, default 3) artifact chunks "chunk i" and one
// progress message to its caller, then replies "streamed N".
type Stream struct{ h grain.Host }

// OnMessage implements grain.Agent.
func (a *Stream) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	n, err := strconv.Atoi(m.Message)
	if err != nil {
		n = 3
	}
	if err := a.h.Send(ctx, m.From, &grain.Message{Message: "working on it"}); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		chunk := &grain.Message{MessageType: typeArtifact, Message: fmt.Sprintf("chunk %d;", i), State: map[string]string{stateArtifactID: "story"}}
		if err := a.h.Send(ctx, m.From, chunk); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = fmt.Sprintf("streamed %d", n)
	return r, nil
}

// Block tells its caller "started" (unless the message is "quiet"), then
// waits until its context ends (it replies with the context's error) or a
// message "release" comes to the gate agent Block:<owner>:gate, which
// opens every Block of that owner on this silo.
type Block struct{ h grain.Host }

var gates = struct {
	sync.Mutex
	m map[string]chan struct{}
}{m: map[string]chan struct{}{}}

func gate(owner string) chan struct{} {
	gates.Lock()
	defer gates.Unlock()
	g := gates.m[owner]
	if g == nil {
		g = make(chan struct{})
		gates.m[owner] = g
	}
	return g
}

// Started counts the Block turns that started, by owner.
var Started = struct {
	sync.Mutex
	N map[string]int
}{N: map[string]int{}}

// Canceled counts the Block turns whose context was cancelled, by owner.
var Canceled = struct {
	sync.Mutex
	N map[string]int
}{N: map[string]int{}}

// OnMessage implements grain.Agent.
func (a *Block) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	owner := a.h.Owner()
	if a.h.Address().Alias == "gate" {
		if m.Message == "release" {
			gates.Lock()
			if g := gates.m[owner]; g != nil {
				close(g)
				delete(gates.m, owner)
			}
			gates.Unlock()
		}
		return m.Response(), nil
	}
	g := gate(owner)
	Started.Lock()
	Started.N[owner]++
	Started.Unlock()
	if m.From != "" && m.Kind == grain.KindRequest && m.Message != "quiet" {
		// The caller may see the push and cancel before Send returns: a
		// Send that fails because the turn ended counts as cancelled below.
		if err := a.h.Send(ctx, m.From, &grain.Message{Message: "started"}); err != nil && ctx.Err() == nil {
			return nil, err
		}
	}
	select {
	case <-g:
		r := m.Response()
		r.Message = "released"
		return r, nil
	case <-ctx.Done():
		Canceled.Lock()
		Canceled.N[owner]++
		Canceled.Unlock()
		return nil, errs.Wrap(codes.Canceled, ctx.Err(), "blocked turn ended")
	}
}
