// Command fanout is a silo program with a small pipeline that fans out:
// Planner asks one Researcher per topic at once (fan-out), waits for all
// of them (fan-in), and passes their findings to a Writer (the next stage
// of the pipeline), whose report is its reply. Each Researcher is an agent
// of its own, Researcher:<owner>:<topic>, placed on whatever silo owns it,
// so the work spreads over the cluster.
package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"
	"sync"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/grain"
)

// topics are what Planner asks a Researcher about.
var topics = []string{"food", "museums", "weather"}

// Planner fans a request out to the researchers and has the writer
// report.
type Planner struct{ host grain.Host }

// OnMessage implements grain.Agent.
func (p *Planner) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	findings := make([]string, len(topics))
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() {
			// Relative addresses (Type:alias) are the sender's owner's.
			r, err := p.host.Ask(ctx, "Researcher:"+topic, grain.Text(m.Message))
			if err != nil {
				errs[i] = fmt.Errorf("researcher %s: %w", topic, err)
				return
			}
			findings[i] = r.Message
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // the first failure fails the request, with its code
		}
	}
	report, err := p.host.Ask(ctx, "Writer:w", grain.Text(strings.Join(findings, "\n")))
	if err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = report.Message
	return r, nil
}

// Researcher finds out about its topic (its alias).
type Researcher struct{ topic string }

// OnMessage implements grain.Agent.
func (r Researcher) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	reply := m.Response()
	reply.Message = fmt.Sprintf("%s of %s: noted", r.topic, m.Message)
	return reply, nil
}

// Writer writes the findings, one a line, into a report.
type Writer struct{}

// OnMessage implements grain.Agent.
func (Writer) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	lines := strings.Split(m.Message, "\n")
	sort.Strings(lines)
	r := m.Response()
	r.Message = fmt.Sprintf("report (%d findings): %s", len(lines), strings.Join(lines, "; "))
	return r, nil
}

func main() {
	reg := grain.NewRegistry()
	for name, f := range map[string]grain.Factory{
		"Planner":    func(h grain.Host) (grain.Agent, error) { return &Planner{host: h}, nil },
		"Researcher": func(h grain.Host) (grain.Agent, error) { return Researcher{topic: h.Address().Alias}, nil },
		"Writer":     func(grain.Host) (grain.Agent, error) { return Writer{}, nil },
	} {
		if err := reg.Register(name, f); err != nil {
			log.Fatal(err)
		}
	}
	cluster.Main(reg)
}
