package grain

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Reminder is a durable reminder of one agent: at its first due time, then
// every Period, the agent gets a ONE_WAY message of MessageType with text
// Message, activated if need be. Unlike a timer, it lives in the reminder
// store until unregistered, across deactivations, restarts and moves.
type Reminder struct {
	Name        string
	Period      time.Duration
	MessageType string
	Message     string
	// Due is the first tick; later ticks follow at Due + k*Period. A first
	// tick already due when the reminder is registered fires at once.
	Due time.Time
}

// ReminderService stores and fires reminders; package reminders implements it
// on etcd. Methods are called concurrently, from agents' turns.
type ReminderService interface {
	// Register creates or replaces the reminder named r.Name of addr, first
	// due at r.Due (at once if that is now or just past; one period from now
	// if zero).
	Register(ctx context.Context, addr Address, r Reminder) error
	// Unregister removes it; NotFound if there is none.
	Unregister(ctx context.Context, addr Address, name string) error
	// List returns addr's reminders, by name.
	List(ctx context.Context, addr Address) ([]Reminder, error)
}

// RegisterReminder creates or replaces a durable reminder of this agent,
// first due after due (0: at once; on the runtime's Clock), then every period.
func (a *activation) RegisterReminder(ctx context.Context, name string, due, period time.Duration, messageType, message string) error {
	svc := a.rt.cfg.Reminders
	if svc == nil {
		return errs.New(codes.Unavailable, "reminders are not configured on this silo")
	}
	if due < 0 {
		return errs.New(codes.InvalidArgument, "reminder %q: negative due time %v", name, due)
	}
	if IsReserved(messageType) {
		return errs.New(codes.InvalidArgument, "reminder %q: message type %q is reserved", name, messageType)
	}
	r := Reminder{Name: name, Period: period, MessageType: messageType, Message: message, Due: a.rt.clock.Now().Add(due)}
	return svc.Register(ctx, a.address(), r)
}

// UnregisterReminder removes a reminder of this agent.
func (a *activation) UnregisterReminder(ctx context.Context, name string) error {
	svc := a.rt.cfg.Reminders
	if svc == nil {
		return errs.New(codes.Unavailable, "reminders are not configured on this silo")
	}
	return svc.Unregister(ctx, a.address(), name)
}

// Reminders lists this agent's reminders.
func (a *activation) Reminders(ctx context.Context) ([]Reminder, error) {
	svc := a.rt.cfg.Reminders
	if svc == nil {
		return nil, errs.New(codes.Unavailable, "reminders are not configured on this silo")
	}
	return svc.List(ctx, a.address())
}
