package a2a_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

type quoteIn struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type quoteOut struct {
	Price float64 `json:"price"`
}

// schemaOf finds the schemas of skill id in a card's typed-skill extension.
func schemaOf(t *testing.T, card *spec.AgentCard, id string) (in, out json.RawMessage) {
	t.Helper()
	for _, ext := range card.Capabilities.Extensions {
		if ext.URI != a2a.SkillSchemasExtension {
			continue
		}
		b, err := json.Marshal(ext.Params)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			MetadataKey string `json:"metadataKey"`
			Skills      map[string]struct {
				In  json.RawMessage `json:"inputSchema"`
				Out json.RawMessage `json:"outputSchema"`
			} `json:"skills"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.MetadataKey != a2a.MetaSkill {
			t.Fatalf("extension params %s: %v", b, err)
		}
		return p.Skills[id].In, p.Skills[id].Out
	}
	t.Fatalf("card %s has no %s extension", card.Name, a2a.SkillSchemasExtension)
	return nil, nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// A typed skill on A2A: the card's skill takes and gives JSON, its schemas
// in the card's extension (the agent's card and the directory card); a
// message naming the skill in its metadata with a data part calls it, and
// arguments that do not match reject the task before the agent runs.
func TestTypedSkill(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/typed/", nil)
	skill := grain.TypedSkill[quoteIn, quoteOut]("quote", "Prices an order.", "shop")
	var runs atomic.Int32
	err := s.Runtime().Registry().Register("Shop", func(grain.Host) (grain.Agent, error) {
		return typedAgent(grain.TypedHandler(func(_ context.Context, in quoteIn) (quoteOut, error) {
			runs.Add(1)
			return quoteOut{Price: 2.5 * float64(in.Qty)}, nil
		})), nil
	}, grain.TypeInfo{Skills: []grain.Skill{skill}})
	if err != nil {
		t.Fatal(err)
	}
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	base := "http://" + s.A2AAddr()

	card, err := (&agentcard.Resolver{Client: httpClient(t, dev)}).Resolve(t.Context(), base, agentcard.WithPath("/a2a/Shop/dev/s/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(card.Skills) != 1 || !slices.Equal(card.Skills[0].InputModes, []string{"application/json"}) || !slices.Equal(card.Skills[0].OutputModes, []string{"application/json"}) {
		t.Fatalf("card skills %+v", card.Skills)
	}
	if in, out := schemaOf(t, card, "quote"); !sameJSON(in, skill.InputSchema) || !sameJSON(out, skill.OutputSchema) {
		t.Fatalf("card schemas %s, %s; want %s, %s", in, out, skill.InputSchema, skill.OutputSchema)
	}
	root, err := (&agentcard.Resolver{Client: httpClient(t, dev)}).Resolve(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := schemaOf(t, root, "Shop/quote"); !sameJSON(in, skill.InputSchema) {
		t.Fatalf("directory card schema %s", in)
	}

	// GET /a2a lists the skill with its schemas.
	resp, err := httpClient(t, dev).Get(base + "/a2a?skill=shop")
	if err != nil {
		t.Fatal(err)
	}
	var listing struct {
		Types []struct {
			Name   string `json:"name"`
			Skills []struct {
				InputSchema  json.RawMessage `json:"inputSchema"`
				OutputSchema json.RawMessage `json:"outputSchema"`
			} `json:"skills"`
		} `json:"types"`
	}
	err = json.NewDecoder(resp.Body).Decode(&listing)
	resp.Body.Close()
	if err != nil || len(listing.Types) != 1 || !sameJSON(listing.Types[0].Skills[0].InputSchema, skill.InputSchema) || !sameJSON(listing.Types[0].Skills[0].OutputSchema, skill.OutputSchema) {
		t.Fatalf("GET /a2a: %+v, %v", listing, err)
	}

	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, s, "Shop/dev/s", tr, dev)
			call := func(args any) *spec.Task {
				m := spec.NewMessage(spec.MessageRoleUser, spec.NewDataPart(args))
				m.Metadata = map[string]any{a2a.MetaSkill: "quote"}
				return taskOf(t)(c.SendMessage(t.Context(), &spec.SendMessageRequest{Message: m}))
			}
			before := runs.Load()
			task := call(map[string]any{"item": "pen", "qty": 4})
			if task.Status.State != spec.TaskStateCompleted || len(task.Artifacts) != 1 {
				t.Fatalf("quote: %s %+v", task.Status.State, task.Artifacts)
			}
			var got quoteOut
			if d := task.Artifacts[0].Parts[0].Data(); d == nil {
				t.Fatalf("artifact parts %+v, want a data part", task.Artifacts[0].Parts)
			} else if b, _ := json.Marshal(d); json.Unmarshal(b, &got) != nil || got.Price != 10 {
				t.Fatalf("quote data %s", b)
			}
			task = call(map[string]any{"item": "pen", "qty": "four"})
			if task.Status.State != spec.TaskStateRejected || !strings.Contains(statusText(task), "input schema") {
				t.Fatalf("bad arguments: %s %q, want rejected by the schema", task.Status.State, statusText(task))
			}
			if n := runs.Load() - before; n != 1 {
				t.Fatalf("the agent ran %d times, want once", n)
			}
		})
	}
}

// typedAgent adapts a handler to grain.Agent.
type typedAgent func(ctx context.Context, m *grain.Message) (*grain.Message, error)

func (f typedAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}
