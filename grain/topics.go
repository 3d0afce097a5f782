package grain

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// TopicService publishes to topics and keeps durable subscriptions;
// package topics implements it. Methods are called concurrently, from
// agents' turns.
type TopicService interface {
	// Publish publishes msg to topic (`owner:name`, or a name of from's
	// owner) on behalf of the agent or session from, and returns once it is
	// durable, with its id.
	Publish(ctx context.Context, from, topic string, msg *Message) (id string, err error)
	// Subscribe adds agent to the subscription name of agent's owner, made
	// with pattern if it does not exist.
	Subscribe(ctx context.Context, agent Address, name, pattern string, maxAttempts int) error
	// Unsubscribe removes agent from the subscription name.
	Unsubscribe(ctx context.Context, agent Address, name string) error
}

// SubscribeOption adjusts a subscription that Host.Subscribe creates.
type SubscribeOption func(*subscribeOptions)

type subscribeOptions struct{ maxAttempts int }

// WithMaxAttempts bounds the deliveries of a message before it becomes a
// dead letter (default 5).
func WithMaxAttempts(n int) SubscribeOption {
	return func(o *subscribeOptions) { o.maxAttempts = n }
}

// Publish implements Host.
func (a *activation) Publish(ctx context.Context, topic string, msg *Message) (string, error) {
	svc := a.rt.cfg.Topics
	if svc == nil {
		return "", errs.New(codes.Unavailable, "topics are not configured on this silo")
	}
	if msg == nil {
		return "", errs.New(codes.InvalidArgument, "nil message")
	}
	capLabel(msg, a.turnMessage(ctx))
	if msg.traceparent == "" {
		if t := turnFrom(ctx); t != nil {
			msg.traceparent = a.rt.traceparent(ctx, t)
		}
	}
	return svc.Publish(ctx, a.key, topic, msg)
}

// Subscribe implements Host.
func (a *activation) Subscribe(ctx context.Context, name, pattern string, opts ...SubscribeOption) error {
	svc := a.rt.cfg.Topics
	if svc == nil {
		return errs.New(codes.Unavailable, "topics are not configured on this silo")
	}
	var o subscribeOptions
	for _, f := range opts {
		f(&o)
	}
	return svc.Subscribe(ctx, a.address(), name, pattern, o.maxAttempts)
}

// Unsubscribe implements Host.
func (a *activation) Unsubscribe(ctx context.Context, name string) error {
	svc := a.rt.cfg.Topics
	if svc == nil {
		return errs.New(codes.Unavailable, "topics are not configured on this silo")
	}
	return svc.Unsubscribe(ctx, a.address(), name)
}

// OutcomeError is what a handler of a topic delivery returns to ask for
// the message again later (Retry) or to declare it poison (Poison). Any
// other error also asks for a retry, after the subscription's backoff; nil
// acknowledges the message.
type OutcomeError struct {
	// Poison: the message can never be handled; it becomes a dead letter.
	Poison bool
	// After is the least wait before the retry; 0: the subscription's
	// backoff.
	After time.Duration
	// Reason is recorded in the dead letter, or as the retry's last error.
	Reason string
}

func (e *OutcomeError) Error() string {
	if e.Poison {
		return "poison: " + e.Reason
	}
	return "retry: " + e.Reason
}

// Retry returns the error with which a topic handler asks for the message
// again after at least after (0: the subscription's exponential backoff),
// recording reason. The retry counts as an attempt: past the
// subscription's maximum, the message becomes a dead letter.
func Retry(after time.Duration, reason string) error {
	return &OutcomeError{After: max(after, 0), Reason: reason}
}

// Poison returns the error with which a topic handler declares the message
// poison: it is not delivered again and becomes a dead letter with reason.
func Poison(reason string) error { return &OutcomeError{Poison: true, Reason: reason} }

// The reply types that carry a handler's outcome back to the silo that
// delivered a topic message (which may be another silo).
const (
	outcomeRetry  = ReservedPrefix + "retry"
	outcomePoison = ReservedPrefix + "poison"
)

// outcomeReply turns an *OutcomeError returned for a topic delivery into
// the reply that carries it; other results stay as they are.
func outcomeReply(msg *Message, reply *Message, err error) (*Message, error) {
	var oe *OutcomeError
	if !errors.As(err, &oe) {
		return reply, err
	}
	r := msg.Response()
	r.Message = oe.Reason
	if oe.Poison {
		r.MessageType = outcomePoison
	} else {
		r.MessageType = outcomeRetry
		r.State = map[string]string{"after_ms": strconv.FormatInt(oe.After.Milliseconds(), 10)}
	}
	return r, nil
}

// Outcome reads the result of a topic delivery (the reply and error of
// the Ask that delivered it): nil for an acknowledgment, else the
// *OutcomeError the handler returned, or err itself, any other failure.
func Outcome(reply *Message, err error) error {
	if err != nil || reply == nil {
		return err
	}
	switch reply.MessageType {
	case outcomePoison:
		return &OutcomeError{Poison: true, Reason: reply.Message}
	case outcomeRetry:
		ms, _ := strconv.ParseInt(reply.State["after_ms"], 10, 64)
		return &OutcomeError{After: time.Duration(max(ms, 0)) * time.Millisecond, Reason: reply.Message}
	}
	return nil
}
