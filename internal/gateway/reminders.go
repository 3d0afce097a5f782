package gateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// ListReminders implements agentsilov1.GatewayServer.
func (g *Gateway) ListReminders(ctx context.Context, req *agentsilov1.ListRemindersRequest) (*agentsilov1.ListRemindersResponse, error) {
	p, err := unaryPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	addr, err := grain.Resolve(req.GetAgent(), p)
	if err != nil {
		return nil, err
	}
	svc := g.rt.Config().Reminders
	if svc == nil {
		return nil, errs.New(codes.Unavailable, "reminders are not configured on silo %s", g.cfg.Silo)
	}
	rs, err := svc.List(ctx, addr)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]*agentsilov1.ReminderInfo, 0, len(rs))
	for _, r := range rs {
		out = append(out, &agentsilov1.ReminderInfo{
			Name:        r.Name,
			Period:      durationpb.New(r.Period),
			MessageType: r.MessageType,
			Message:     r.Message,
			Due:         timestamppb.New(nextTick(r.Due, r.Period, now)),
		})
	}
	return &agentsilov1.ListRemindersResponse{Reminders: out}, nil
}

// nextTick returns the first tick of a reminder (due, then every period) at
// or after now.
func nextTick(due time.Time, period time.Duration, now time.Time) time.Time {
	if period <= 0 || !due.Before(now) {
		return due
	}
	k := (now.Sub(due) + period - 1) / period
	return due.Add(k * period)
}
