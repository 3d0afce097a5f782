// Package demoagents holds the demo agent types that `silo --demo` serves
// and the guides' commands call, and the agent types the cluster tests rely
// on (Journal, StateProbe, TopicSink: registered only by a `silo` built
// with the agentsilo_testhooks tag, so the production binary links none of
// them). They are test fixtures and demos,
// apart from the example programs of examples/ that users read. Each shows
// one part of the programming model:
//
//   - Echo replies with what it got (request/response).
//   - Counter keeps a count in the silo's state store (durable state with
//     etags: the count survives deactivation, crashes and moves).
//   - Progress pushes three "thinking" one-way messages to its caller, then
//     replies (pushing to a client session).
//   - Pipeline asks two agents in sequence (agent-to-agent Ask, configuration
//     read lazily).
//   - FanOut asks N agents in parallel and merges their replies.
//   - Ticker registers a durable reminder and counts its ticks.
//   - Inbox subscribes to topics and shows each outcome of a delivery
//     (acknowledge, retry, poison).
package demoagents

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Register adds every demo type to reg, with its description and skills.
func Register(reg *grain.Registry) error {
	for _, t := range []struct {
		f    grain.Factory
		info grain.TypeInfo
	}{
		{func(grain.Host) (grain.Agent, error) { return Echo{}, nil }, grain.TypeInfo{Name: "Echo",
			Description: "Replies with the text it was sent.",
			Skills:      []grain.Skill{{Name: "echo", Description: "repeats a message", Tags: []string{"test", "echo"}, Examples: []string{"hello"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &Counter{count: grain.NewState[int64](h)}, nil }, grain.TypeInfo{Name: "Counter",
			Description: "Counts, durably: its count lives in the state store.",
			Skills:      []grain.Skill{{Name: "count", Description: "adds one, adds n, reads or resets the count", Tags: []string{"counting", "state"}, Examples: []string{"", "add 5", "get", "reset"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &Progress{host: h}, nil }, grain.TypeInfo{Name: "Progress",
			Description: "Pushes three progress lines to its caller, then replies.",
			Skills:      []grain.Skill{{Name: "think", Description: "reports progress while it works", Tags: []string{"streaming"}, Examples: []string{"plan a trip"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &Pipeline{host: h}, nil }, grain.TypeInfo{Name: "Pipeline",
			Description: "Asks the agents of its configured stages in turn.",
			Skills:      []grain.Skill{{Name: "chain", Description: "passes a message through agents", Tags: []string{"orchestration"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &FanOut{host: h}, nil }, grain.TypeInfo{Name: "FanOut",
			Description: "Asks N agents at once and merges their replies.",
			Skills:      []grain.Skill{{Name: "scatter", Description: "parallel asks", Tags: []string{"orchestration"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &Ticker{host: h}, nil }, grain.TypeInfo{Name: "Ticker",
			Description: "Counts the ticks of a durable reminder.",
			Skills:      []grain.Skill{{Name: "tick", Description: "start PERIOD [DUE], stop, count", Tags: []string{"reminders"}, Examples: []string{"start 1m", "count"}}}}},
		{func(h grain.Host) (grain.Agent, error) { return &Inbox{host: h}, nil }, grain.TypeInfo{Name: "Inbox",
			Description: "Takes the messages of its topic subscriptions: acknowledges, retries or declares poison.",
			Skills:      []grain.Skill{{Name: "subscribe", Description: "subscribe NAME PATTERN, count", Tags: []string{"topics"}, Examples: []string{"subscribe orders orders.#", "count"}}}}},
	} {
		if err := reg.Register(t.info.Name, t.f, t.info); err != nil {
			return err
		}
	}
	return nil
}

// Echo replies with the text it was sent.
type Echo struct{}

// OnMessage implements grain.Agent.
func (Echo) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = m.Message
	return r, nil
}

// Counter counts durably. "get" replies with the count, "reset" sets it to
// zero, anything else (an Ask or a Send) adds one, or N for "add N". The count
// lives in the silo's state store (grain.State), so it survives deactivation,
// crashes and moves; a change is saved, with the etag loaded, before the
// reply.
type Counter struct{ count *grain.State[int64] }

// OnActivate implements grain.Activator: the count is loaded once per
// activation.
func (c *Counter) OnActivate(ctx context.Context) error { return c.count.Load(ctx) }

// OnMessage implements grain.Agent. Every change is saved before the reply,
// with the etag loaded, so a reply is never a count that was not stored.
func (c *Counter) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	var change func(n *int64) error
	switch cmd, arg, _ := strings.Cut(strings.TrimSpace(m.Message), " "); cmd {
	case "get":
	case "reset":
		change = func(n *int64) error { *n = 0; return nil }
	case "add":
		d, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "add %q: want a number", arg)
		}
		change = func(n *int64) error { *n += d; return nil }
	default:
		change = func(n *int64) error { *n++; return nil }
	}
	if change != nil {
		// A change, once begun, is not cut short by the caller's
		// cancellation (which reaches the turn wherever the caller is), only
		// by its deadline: a cancelled caller leaves no save whose outcome
		// is unknown behind.
		if err := ctx.Err(); err != nil {
			code := codes.Canceled
			if errors.Is(err, context.DeadlineExceeded) {
				code = codes.DeadlineExceeded
			}
			return nil, errs.Wrap(code, err, "counter")
		}
		uctx := context.WithoutCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			uctx, cancel = context.WithDeadline(uctx, dl)
			defer cancel()
		}
		if err := c.count.Update(uctx, change); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = strconv.FormatInt(c.count.Value, 10)
	return r, nil
}

// Progress shows an agent pushing to its caller: it sends three one-way
// "thinking" messages to the sender (a client session or an agent), then
// replies.
type Progress struct{ host grain.Host }

// OnMessage implements grain.Agent.
func (p *Progress) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	for i := 1; i <= 3; i++ {
		step := &grain.Message{MessageType: "progress", Message: fmt.Sprintf("thinking %d/3 about %q", i, m.Message)}
		if err := p.host.Send(ctx, m.From, step); err != nil {
			return nil, err
		}
	}
	r := m.Response()
	r.Message = "done: " + m.Message
	return r, nil
}

// Pipeline asks two agents in sequence, feeding the first one's reply to the
// second. The stages come from the agent's configuration (CreateAgent with
// stages=A,B), by default two Echo agents next to it.
type Pipeline struct{ host grain.Host }

// OnMessage implements grain.Agent.
func (p *Pipeline) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	cfg, err := p.host.Config(ctx)
	if err != nil {
		return nil, err
	}
	alias := p.host.Address().Alias
	stages := []string{"Echo:" + alias + "-1", "Echo:" + alias + "-2"}
	if s := cfg["stages"]; s != "" {
		stages = strings.Split(s, ",")
	}
	text := m.Message
	for _, stage := range stages {
		r, err := p.host.Ask(ctx, stage, grain.Text(text))
		if err != nil {
			return nil, err
		}
		text = r.Message
	}
	r := m.Response()
	r.Message = fmt.Sprintf("%s (via %s)", text, strings.Join(stages, " -> "))
	return r, nil
}

// FanOut asks N Echo agents in parallel (N from the message's state "n",
// default 3, at most 100) and merges their replies.
type FanOut struct{ host grain.Host }

// OnMessage implements grain.Agent.
func (f *FanOut) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	n := 3
	if s, ok := m.State["n"]; ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 100 {
			return nil, errs.New(codes.InvalidArgument, "n=%q: want 1..100", s)
		}
		n = v
	}
	replies := make([]string, n)
	errsOut := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := fmt.Sprintf("Echo:%s-%d", f.host.Address().Alias, i)
			r, err := f.host.Ask(ctx, to, grain.Text(fmt.Sprintf("%s #%d", m.Message, i)))
			if err != nil {
				errsOut[i] = err
				return
			}
			replies[i] = r.From + "=" + r.Message
		}()
	}
	wg.Wait()
	for _, err := range errsOut {
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(replies)
	r := m.Response()
	r.Message = fmt.Sprintf("%d replies: %s", n, strings.Join(replies, "; "))
	return r, nil
}
