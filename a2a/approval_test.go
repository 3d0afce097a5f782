package a2a_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

type addIn struct {
	N int `json:"n"`
}

type addOut struct {
	Total int64 `json:"total"`
}

type adder func(context.Context, *grain.Message) (*grain.Message, error)

func (f adder) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return f(ctx, m)
}

// A model agent whose tool needs approval, asked by the A2A SDK's client:
// the task rests in input-required with the approval in a data part, and
// the client's next message on the task, "approve" or "no, because",
// decides it; the task completes with the turn's answer, the call run
// once, or not at all.
func TestApprovalOverA2A(t *testing.T) {
	e := etcdtest.Start(t)
	srv := llmtest.NewFunc(llmtest.Loop{Tool: "Adder_add", Arguments: `{"agent": "x", "input": {"n": 1}}`}.Respond)
	defer srv.Close()
	var total atomic.Int64
	reg := grain.NewRegistry()
	err := reg.Register("Adder", func(grain.Host) (grain.Agent, error) {
		return adder(grain.TypedHandler(func(_ context.Context, in addIn) (addOut, error) {
			return addOut{Total: total.Add(int64(in.N))}, nil
		})), nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[addIn, addOut]("add", "Add n.")}})
	if err != nil {
		t.Fatal(err)
	}
	def, err := llm.ParseDefinition(fmt.Appendf(nil, `type: Careful
model: {provider: openai, base_url: %s, name: fake-1}
tools: [{agent: Adder}]
approval: [Adder_add]
`, srv.OpenAIURL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := llm.Register(reg, def, llm.WithMaxRetries(0)); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = "s1"
	cfg.GatewayAddr, cfg.HTTPAddr, cfg.A2A.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: "/approval/"}
	cfg.Logger = testutil.Logger()
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)

	for _, c := range []struct {
		answer, want string
		total        int64
	}{
		{"approve", `done: {"total":1}`, 1},
		{"no, not today", "done: not run: a person's approval was needed and the call was denied by dev: not today", 1},
	} {
		alias := strings.Fields(c.answer)[0]
		cl := dial(t, s, "Careful/dev/"+strings.Trim(alias, ","), "JSONRPC", dev)
		task := asTask(cl.SendMessage(t.Context(), text("add one")))
		if task.Status.State != spec.TaskStateInputRequired || !strings.Contains(statusText(task), "Adder_add") {
			t.Fatalf("%s: %s %q, want input-required naming the tool", c.answer, task.Status.State, statusText(task))
		}
		var data map[string]any
		for _, p := range task.Status.Message.Parts {
			if d, ok := p.Data().(map[string]any); ok {
				data = d
			}
		}
		if aps, _ := data["approvals"].([]any); len(aps) != 1 {
			t.Fatalf("%s: the status message's data part %v, want one approval", c.answer, data)
		}
		task = asTask(cl.SendMessage(t.Context(), follow(task, c.answer)))
		if task.Status.State != spec.TaskStateCompleted || artifactText(task) != c.want {
			t.Fatalf("%s: %s %q %q, want completed with %q", c.answer, task.Status.State, artifactText(task), statusText(task), c.want)
		}
		if total.Load() != c.total {
			t.Fatalf("%s: Adder's total %d, want %d", c.answer, total.Load(), c.total)
		}
	}
}
