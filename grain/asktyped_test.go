package grain_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
)

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// An agent's turn asks another agent's typed skill with AskTyped, with
// its Host: the reply decoded; a reply that is not the skill's JSON is
// Internal saying the turn ran; the callee's error comes back as it is.
func TestAskTypedFromATurn(t *testing.T) {
	env := graintest.New(t)
	add := grain.TypedHandler(func(_ context.Context, in addIn) (addOut, error) {
		if in.A < 0 {
			return addOut{}, errs.New(codes.InvalidArgument, "a is negative")
		}
		return addOut{Sum: in.A + in.B}, nil
	})
	env.Register("Adder", func(grain.Host) (grain.Agent, error) {
		return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			if m.MessageType == "text" {
				r := m.Response()
				r.Message = "no data"
				return r, nil
			}
			return add(ctx, m)
		}), nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[addIn, addOut]("add", "Adds a and b.")}})
	env.Register("Caller", func(h grain.Host) (grain.Agent, error) {
		return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			var err error
			r := m.Response()
			switch m.Message {
			case "sum":
				var out addOut
				out, err = grain.AskTyped[addIn, addOut](ctx, h, "Adder:x", "add", addIn{A: 2, B: 3})
				r.Message = strings.Repeat("+", out.Sum)
			case "negative":
				_, err = grain.AskTyped[addIn, addOut](ctx, h, "Adder:x", "add", addIn{A: -1})
			case "text":
				_, err = grain.AskTyped[addIn, addOut](ctx, h, "Adder:x", "text", addIn{})
			}
			return r, err
		}), nil
	})
	ctx := t.Context()
	if got, err := env.AskText(ctx, "Caller:c", "sum"); err != nil || got != "+++++" {
		t.Fatalf("sum: %q, %v", got, err)
	}
	if _, err := env.AskText(ctx, "Caller:c", "negative"); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a is negative") {
		t.Fatalf("the callee's error: %v", err)
	}
	if _, err := env.AskText(ctx, "Caller:c", "text"); errs.Code(err) != codes.Internal || !strings.Contains(err.Error(), "the turn ran, but the reply has no JSON data") {
		t.Fatalf("a reply without data: %v", err)
	}
}

// agentFunc is an agent that is its OnMessage.
type agentFunc func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f agentFunc) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}
