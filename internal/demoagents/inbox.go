package demoagents

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/grain"
)

// Inbox is a topic subscriber that shows each outcome of a delivery. Its
// handler acknowledges a message by returning nil, asks for it again
// later with grain.Retry, or declares it poison with grain.Poison:
//
//	"poison..."   poison: a dead letter at once, with the reason
//	"retry..."    Retry after 100 ms until the third attempt, then ack
//	anything else acknowledged
//
// Subscribe it with `client subscribe Inbox:a orders orders.#`, or have it
// subscribe itself: the text "subscribe NAME PATTERN". "count" answers how
// many messages it acknowledged in this activation.
type Inbox struct {
	host  grain.Host
	acked int
}

// OnMessage implements grain.Agent.
func (in *Inbox) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic == "" { // not a delivery: a command
		r := m.Response()
		switch f := strings.Fields(m.Message); {
		case len(f) == 3 && f[0] == "subscribe":
			return r, in.host.Subscribe(ctx, f[1], f[2])
		case len(f) == 1 && f[0] == "count":
			r.Message = strconv.Itoa(in.acked)
		}
		return r, nil
	}
	switch {
	case strings.HasPrefix(m.Message, "poison"):
		return nil, grain.Poison("cannot parse " + strconv.Quote(m.Message))
	case strings.HasPrefix(m.Message, "retry") && m.Attempt < 3:
		return nil, grain.Retry(100*time.Millisecond, "the warehouse is busy")
	}
	in.acked++
	in.host.Logger().InfoContext(ctx, "order", "topic", m.Topic, "attempt", m.Attempt, "text", m.Message)
	return nil, nil // acknowledged
}
