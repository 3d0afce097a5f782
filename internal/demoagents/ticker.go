package demoagents

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// TickerReminder names the reminder of a Ticker, and TickType is the message
// type of its ticks.
const (
	TickerReminder = "tick"
	TickType       = "tick"
)

// Ticker shows durable reminders. "start 90s" registers its reminder "tick"
// with that period, first due one period from now, and "start 90s 0s" the
// same with the first tick at once (a period under the silo's
// --min-reminder-period is InvalidArgument); "stop" unregisters it, and
// "count" replies with the ticks this activation has received. The reminder
// outlives the activation: a tick re-activates a deactivated Ticker, whose
// count then starts again at one.
type Ticker struct {
	host grain.Host
	n    int64
}

// OnMessage implements grain.Agent.
func (t *Ticker) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.MessageType == TickType && m.Kind == grain.KindOneWay {
		t.n++
		return nil, nil
	}
	r := m.Response()
	switch cmd, arg, _ := strings.Cut(strings.TrimSpace(m.Message), " "); cmd {
	case "start":
		periodArg, dueArg, withDue := strings.Cut(strings.TrimSpace(arg), " ")
		period, err := time.ParseDuration(periodArg)
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "start %q: want a period such as 90s or 5m, and optionally a first due time such as 0s", arg)
		}
		due := period
		if withDue {
			if due, err = time.ParseDuration(strings.TrimSpace(dueArg)); err != nil || due < 0 {
				return nil, errs.New(codes.InvalidArgument, "start %q: want a due time such as 0s or 10s after the period", arg)
			}
		}
		if err := t.host.RegisterReminder(ctx, TickerReminder, due, period, TickType, ""); err != nil {
			return nil, err
		}
		r.Message = fmt.Sprintf("reminder %q every %v", TickerReminder, period)
		if withDue {
			r.Message += fmt.Sprintf(", first in %v", due)
		}
	case "stop":
		if err := t.host.UnregisterReminder(ctx, TickerReminder); err != nil {
			return nil, err
		}
		r.Message = "stopped"
	case "count":
		r.Message = strconv.FormatInt(t.n, 10)
	default:
		return nil, errs.New(codes.InvalidArgument, "unknown command %q: want start PERIOD, stop or count", cmd)
	}
	return r, nil
}
