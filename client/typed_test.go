package client_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

type sumIn struct {
	Numbers []float64 `json:"numbers" jsonschema:"the numbers to add"`
}

type sumOut struct {
	Sum   float64 `json:"sum"`
	Count int     `json:"count"`
}

// AskTyped against a typed skill: the reply decoded, bad arguments refused
// by the gateway, a reply of another shape Internal.
func TestAskTyped(t *testing.T) {
	s := start(t)
	err := s.rt.Registry().Register("Calc", func(grain.Host) (grain.Agent, error) {
		sum := grain.TypedHandler(func(_ context.Context, in sumIn) (sumOut, error) {
			out := sumOut{Count: len(in.Numbers)}
			for _, n := range in.Numbers {
				out.Sum += n
			}
			return out, nil
		})
		return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			if m.MessageType == "text" {
				r := m.Response()
				r.Message = "no data"
				return r, nil
			}
			return sum(ctx, m)
		}), nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[sumIn, sumOut]("sum", "Adds numbers."), {Name: "text"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, []string{s.addr})
	out, err := client.AskTyped[sumIn, sumOut](t.Context(), c, "Calc:c", "sum", sumIn{Numbers: []float64{1, 2, 3.5}})
	if err != nil || out.Sum != 6.5 || out.Count != 3 {
		t.Fatalf("AskTyped = %+v, %v", out, err)
	}
	// The one helper agents use takes the SDK's client too.
	if out, err := grain.AskTyped[sumIn, sumOut](t.Context(), c, "Calc:c", "sum", sumIn{Numbers: []float64{2, 2}}); err != nil || out.Sum != 4 {
		t.Fatalf("grain.AskTyped with the client = %+v, %v", out, err)
	}
	// Out = any takes whatever JSON it is.
	if v, err := client.AskTyped[sumIn, any](t.Context(), c, "Calc:c", "sum", sumIn{Numbers: []float64{1}}); err != nil || v.(map[string]any)["count"] != 1.0 {
		t.Fatalf("AskTyped[sumIn, any] = %v, %v", v, err)
	}
	// Arguments of another shape: the gateway refuses them.
	if _, err := client.AskTyped[map[string]string, sumOut](t.Context(), c, "Calc:c", "sum", map[string]string{"numbers": "1,2"}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad arguments: %v, want InvalidArgument", err)
	}
	// A reply without JSON data, or of another shape: Internal.
	if _, err := client.AskTyped[sumIn, sumOut](t.Context(), c, "Calc:c", "text", sumIn{}); errs.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no JSON data") {
		t.Fatalf("text reply: %v, want Internal", err)
	}
	if _, err := client.AskTyped[sumIn, []string](t.Context(), c, "Calc:c", "sum", sumIn{}); errs.Code(err) != codes.Internal || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("reply of another shape: %v, want Internal", err)
	}
	// In that does not encode: InvalidArgument, nothing sent.
	if _, err := client.AskTyped[func(), sumOut](t.Context(), c, "Calc:c", "sum", func() {}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("unencodable arguments: %v, want InvalidArgument", err)
	}
}
