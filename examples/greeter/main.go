// Command greeter is a silo program of one's own: one agent type, Greeter,
// served with every flag, the environment, signals and exit codes of
// `silo`. The README's "Running your own silo" builds it as a module of its
// own; tests/ownsilo_test.go does exactly what the README says.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// Greeter greets whoever asks, and counts how often it did.
type Greeter struct{ n int }

func (g *Greeter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	g.n++
	r := m.Response()
	r.Message = fmt.Sprintf("hello, %s (greeting %d)", m.Message, g.n)
	return r, nil
}

func main() {
	reg := grain.NewRegistry()
	if err := reg.Register("Greeter", func(grain.Host) (grain.Agent, error) { return &Greeter{}, nil }); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
