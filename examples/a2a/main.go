// Command a2a is a silo program whose agent is reached over A2A, the
// Agent2Agent protocol: run with --a2a-addr, every agent of the silo is an
// A2A agent at /a2a/<Type>/<owner>/<alias>, with a card made of its type's
// description and skills. Reviewer reviews a text: it reports its progress
// while it works (each becomes a working status update for a streaming A2A
// client), then replies (the task's artifact).
package main

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// Reviewer counts what it was sent and says so.
type Reviewer struct{ host grain.Host }

// OnMessage implements grain.Agent.
func (r *Reviewer) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	// What the agent sends its caller during the turn is progress: over A2A,
	// a working status update with this text.
	if err := r.host.Send(ctx, m.From, &grain.Message{MessageType: "progress", Message: "reading"}); err != nil {
		return nil, err
	}
	words := len(strings.Fields(m.Message))
	reply := m.Response()
	reply.Message = fmt.Sprintf("reviewed: %d words, %d lines", words, strings.Count(m.Message, "\n")+1)
	return reply, nil
}

func main() {
	reg := grain.NewRegistry()
	if err := reg.Register("Reviewer", func(h grain.Host) (grain.Agent, error) { return &Reviewer{host: h}, nil }, grain.TypeInfo{
		Description: "Reviews a text.",
		Skills: []grain.Skill{{Name: "review", Description: "counts the words and lines of a text",
			Tags: []string{"writing"}, Examples: []string{"review this paragraph"}}},
	}); err != nil {
		log.Fatal(err)
	}
	cluster.Main(reg)
}
