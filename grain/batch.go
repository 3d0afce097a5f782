package grain

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// BatchHandler is implemented by agents that take several topic
// deliveries in one turn. A subscription's silo hands a member up to
// topics.Config.MaxDeliveryBatch messages that are due at once, each
// publisher's in publish order; an agent without OnMessages gets them one
// after another through OnMessage, in the same turn, stopping at the first
// that fails. OnMessage stays the handler of everything else (and of
// deliveries that come one at a time).
type BatchHandler interface {
	// OnMessages handles ms (each with Topic, Subscription and Attempt set,
	// as OnMessage's deliveries) and says how many of them, from the first,
	// it handled: those are acknowledged (acknowledgement by position).
	// If n < len(ms), err is the outcome of ms[n] (Retry, Poison or any
	// other error, as from OnMessage; nil: it and those after it come
	// again, no attempt counted), and ms[n+1:] are delivered again, their
	// attempts not counted.
	OnMessages(ctx context.Context, ms []*Message) (n int, err error)
}

// batchType is the message type of a delivery of several topic messages:
// only the runtime delivers topics (the gateway clears Topic), so a
// message of this type with Topic set is the runtime's. It is not of the
// reserved prefix, which silos keep for their own messages to each other:
// a batch goes from silo to silo as an agent's request does.
const (
	batchType     = "agentsilo.topics.batch"
	outcomeFailed = ReservedPrefix + "failed"
)

// isBatch reports whether msg is a delivery of several topic messages.
func isBatch(msg *Message) bool { return msg.Topic != "" && msg.MessageType == batchType }

// Batch returns the delivery of ms, topic deliveries of one subscription
// to one agent (ms[0]'s To), as one REQUEST: package topics delivers with
// it, and reads the reply with BatchOutcome.
func Batch(ms []*Message) (*Message, error) {
	if len(ms) == 0 {
		return nil, errs.New(codes.InvalidArgument, "an empty batch")
	}
	var b []byte
	for _, m := range ms {
		mb, err := proto.Marshal(toWire(m))
		if err != nil {
			return nil, errs.New(codes.Internal, "encode a batch (not sent): %w", err)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, mb)
	}
	f := ms[0]
	return &Message{
		To: f.To, Kind: KindRequest, MessageType: batchType, Data: b,
		Topic: f.Topic, Subscription: f.Subscription, OnBehalfOf: f.OnBehalfOf,
		Attempt: f.Attempt, traceparent: f.traceparent,
	}, nil
}

// unbatch decodes a batch's messages.
func unbatch(msg *Message) ([]*Message, error) {
	var out []*Message
	b := msg.Data
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, errs.New(codes.InvalidArgument, "an unreadable batch")
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, errs.New(codes.InvalidArgument, "an unreadable batch")
		}
		b = b[n:]
		var w agentsilov1.AgentMessage
		if err := proto.Unmarshal(v, &w); err != nil {
			return nil, errs.New(codes.InvalidArgument, "an unreadable batch: %w", err)
		}
		out = append(out, fromWire(&w))
	}
	return out, nil
}

// invokeBatch runs a batch through OnMessages, or OnMessage one message
// after another, and returns the reply that carries how many were
// handled and the outcome of the first that was not: the error of the
// Ask itself then says only that the batch did not reach its agent.
func (a *activation) invokeBatch(ctx context.Context, msg *Message) (*Message, error) {
	ms, err := unbatch(msg)
	if err != nil {
		return nil, err
	}
	var n int
	if h, ok := a.agent.(BatchHandler); ok {
		n, err = h.OnMessages(ctx, ms)
		n = min(max(n, 0), len(ms))
		if n == len(ms) {
			err = nil
		}
	} else {
		for n < len(ms) {
			if _, err = a.agent.OnMessage(ctx, ms[n]); err != nil {
				break
			}
			n++
		}
	}
	r := msg.Response()
	r.State = map[string]string{"n": strconv.Itoa(n)}
	var oe *OutcomeError
	switch {
	case err == nil:
	case errors.As(err, &oe):
		r.Message = oe.Reason
		if oe.Poison {
			r.MessageType = outcomePoison
		} else {
			r.MessageType = outcomeRetry
			r.State["after_ms"] = strconv.FormatInt(oe.After.Milliseconds(), 10)
		}
	default:
		r.MessageType = outcomeFailed
		r.Message = err.Error()
		r.State["code"] = strconv.Itoa(int(errs.Code(err)))
	}
	return r, nil
}

// BatchOutcome reads the result of a delivery made with Batch (the reply
// and error of its Ask): how many of its messages were handled, from the
// first, and the outcome of the next one (nil if all were handled, or if
// the handler stopped without an error: the rest comes again). An Ask
// that failed handled none, and err is the first one's outcome.
func BatchOutcome(reply *Message, err error) (n int, out error) {
	if err != nil {
		return 0, err
	}
	if reply == nil {
		return 0, nil
	}
	n, _ = strconv.Atoi(reply.State["n"])
	if reply.MessageType == outcomeFailed {
		c, _ := strconv.Atoi(reply.State["code"])
		return n, errs.New(codes.Code(c), "the turn ran and failed: %s", reply.Message)
	}
	return n, Outcome(reply, nil)
}
