package demoagents

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// TopicSinkType is the agent type RegisterTopicSink registers.
const TopicSinkType = "TopicSink"

// TopicSink is a test subscriber. For each topic message delivered to it,
// it appends one JSON line to a file shared by every silo on the machine,
// then answers by the message's text:
//
//	poison       grain.Poison: a dead letter at once
//	flaky:N      an error until the Nth attempt, then acknowledged
//	retry:N      grain.Retry (after 10 ms) until the Nth attempt
//	anything     acknowledged
//
// A line records what the test checks: the message's id, subscription,
// attempt, the agent, the silo and pid, and the outcome the handler gave.
// Lines are written before the handler returns: a line with outcome "ack"
// whose acknowledgment did not reach the store (the silo died) is followed
// by another for the same id, which the test counts as a duplicate.
//
// To other messages it answers "subscribe NAME PATTERN [MAX]" by
// subscribing itself (Host.Subscribe), and "publish TOPIC TEXT" by
// publishing (Host.Publish); anything else gets the silo's name.
//
// TopicSink is registered only when a silo runs with the hidden --journal
// flag, on the journal's path plus ".topics".
type TopicSink struct {
	host grain.Host
	file *os.File
}

// SinkLine is one line a TopicSink writes.
type SinkLine struct {
	ID           string `json:"id"`
	Subscription string `json:"sub"`
	Attempt      uint32 `json:"attempt"`
	Agent        string `json:"agent"`
	Silo         string `json:"silo"`
	PID          int    `json:"pid"`
	Text         string `json:"text"`
	From         string `json:"from"`
	Outcome      string `json:"outcome"`
	Traceparent  string `json:"traceparent,omitempty"`
}

// RegisterTopicSink registers TopicSink on reg, appending to the file at
// path (each line one write(2) with O_APPEND, so processes never
// interleave).
func RegisterTopicSink(reg *grain.Registry, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("topic sink: %w", err)
	}
	err = reg.Register(TopicSinkType, func(h grain.Host) (grain.Agent, error) {
		return &TopicSink{host: h, file: f}, nil
	})
	if err != nil {
		f.Close()
	}
	return err
}

// OnMessage implements grain.Agent.
func (s *TopicSink) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic == "" {
		return s.command(ctx, m)
	}
	outcome, err := "ack", error(nil)
	text := m.Message
	if kind, n, ok := strings.Cut(text, ":"); ok {
		if want, perr := strconv.Atoi(n); perr == nil && int(m.Attempt) < want {
			switch kind {
			case "flaky":
				outcome, err = "error", fmt.Errorf("flaky: attempt %d of %d", m.Attempt, want)
			case "retry":
				outcome, err = "retry", grain.Retry(10*time.Millisecond, fmt.Sprintf("attempt %d of %d", m.Attempt, want))
			}
		}
	}
	if text == "poison" {
		outcome, err = "poison", grain.Poison("the sink refuses it")
	}
	b, _ := json.Marshal(SinkLine{
		ID: m.ID, Subscription: m.Subscription, Attempt: m.Attempt, Agent: s.host.Address().String(),
		Silo: s.host.Silo(), PID: os.Getpid(), Text: text, From: m.From, Outcome: outcome, Traceparent: m.Traceparent(),
	})
	if _, werr := s.file.Write(append(b, '\n')); werr != nil {
		return nil, werr // not recorded: not acknowledged either
	}
	return nil, err
}

func (s *TopicSink) command(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	f := strings.Fields(m.Message)
	r := m.Response()
	switch {
	case len(f) >= 3 && f[0] == "subscribe":
		var opts []grain.SubscribeOption
		if len(f) > 3 {
			n, err := strconv.Atoi(f[3])
			if err != nil {
				return nil, err
			}
			opts = append(opts, grain.WithMaxAttempts(n))
		}
		return r, s.host.Subscribe(ctx, f[1], f[2], opts...)
	case len(f) >= 2 && f[0] == "publish":
		id, err := s.host.Publish(ctx, f[1], &grain.Message{Message: strings.Join(f[2:], " ")})
		r.Message = id
		return r, err
	}
	r.Message = s.host.Silo()
	return r, nil
}
