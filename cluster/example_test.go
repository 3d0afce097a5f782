package cluster_test

import (
	"context"
	"log"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// Greeter answers every message with a greeting.
type Greeter struct{}

func (Greeter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = "hello, " + m.Message
	return r, nil
}

// A program of one's own agent types: cluster.Main parses the flags of
// `silo` (--etcd, --gateway-addr, --mcp-addr, ...) and the SILO_* environment,
// runs the silo until SIGTERM or SIGINT and exits.
func ExampleMain() {
	reg := grain.NewRegistry()
	err := reg.Register("Greeter", func(h grain.Host) (grain.Agent, error) { return Greeter{}, nil },
		grain.TypeInfo{
			Description: "Greets whoever writes to it.",
			Skills:      []grain.Skill{{Name: "greet", Description: "Greet someone by name."}},
		})
	if err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
