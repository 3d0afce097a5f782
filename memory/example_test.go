package memory_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/memory"
)

// Planner keeps its decisions in the working memory Memory:<owner>:notes.
type Planner struct{ h grain.Host }

func (p Planner) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	mem := memory.Of(p.h, "notes")
	if _, err := mem.Put(ctx, client.MemoryEntry{Key: "plan", Text: m.Message, Category: "decision"}); err != nil {
		return nil, err
	}
	e, err := mem.Get(ctx, "plan")
	if err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = fmt.Sprintf("%s kept %q (%s)", mem.Address(), e.Text, e.Category)
	return r, nil
}

func ExampleOf() {
	ctx := context.Background()
	reg := grain.NewRegistry()
	// A silo registers Memory itself; a runtime of one's own registers it.
	if err := memory.Register(reg, memory.DefaultConfig()); err != nil {
		log.Fatal(err)
	}
	if err := reg.Register("Planner", func(h grain.Host) (grain.Agent, error) { return Planner{h}, nil }); err != nil {
		log.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.State = grain.NewMemoryStateStore() // a silo's is etcd or PostgreSQL
	rt, err := grain.New(cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)
	r, err := rt.Ask(ctx, &grain.Message{From: "Session:alice:s", To: "Planner:p", Message: "ship friday"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Message)
	// Output: Memory:alice:notes kept "ship friday" (decision)
}
