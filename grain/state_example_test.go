package grain_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/agentsilo/agentsilo/grain"
)

// Counter counts its messages in state that outlives its activations.
type Counter struct{ n *grain.State[int] }

func (c *Counter) OnActivate(ctx context.Context) error { return c.n.Load(ctx) }

func (c *Counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	// Update saves with the etag it holds; on a conflict (another activation
	// wrote meanwhile) it loads the stored count and adds one to that.
	if err := c.n.Update(ctx, func(n *int) error { *n++; return nil }); err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = strconv.Itoa(c.n.Value)
	return r, nil
}

func ExampleState() {
	ctx := context.Background()
	cfg := grain.DefaultConfig()
	// A silo's store comes from state.Open: etcd or PostgreSQL.
	cfg.State = grain.NewMemoryStateStore()
	// The second runtime makes new activations, which find the count.
	for run := range 2 {
		reg := grain.NewRegistry()
		if err := reg.Register("Counter", func(h grain.Host) (grain.Agent, error) {
			return &Counter{n: grain.NewState[int](h)}, nil
		}); err != nil {
			panic(err)
		}
		rt, err := grain.New(cfg, reg)
		if err != nil {
			panic(err)
		}
		for range 2 {
			r, err := rt.Ask(ctx, &grain.Message{From: "Session:alice:s", To: "Counter:c"})
			if err != nil {
				panic(err)
			}
			fmt.Println("run", run, "count", r.Message)
		}
		if err := rt.Close(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// run 0 count 1
	// run 0 count 2
	// run 1 count 3
	// run 1 count 4
}
