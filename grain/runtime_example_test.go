package grain_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsilo/agentsilo/grain"
)

// Echo replies with the text it got.
type Echo struct{}

func (Echo) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = "echo: " + m.Message
	return r, nil
}

// A runtime of its own, without a silo: register an agent type, ask an
// agent of it (activated by the first message), close the runtime (which
// deactivates it). A silo (package cluster) runs the same runtime, placed
// across the cluster.
func Example() {
	ctx := context.Background()
	reg := grain.NewRegistry()
	if err := reg.Register("Echo", func(grain.Host) (grain.Agent, error) { return Echo{}, nil }); err != nil {
		log.Fatal(err)
	}
	rt, err := grain.New(grain.DefaultConfig(), reg)
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)
	reply, err := rt.Ask(ctx, &grain.Message{To: "Echo:alice:one", Message: "hi"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.From, reply.Message)
	// Output: Echo:alice:one echo: hi
}
