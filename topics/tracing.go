package topics

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/internal/tracing"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Spans. A message that is part of a trace (it carries a traceparent: the
// agent's turn that publishes it is traced, or the client's call) gets a
// producer span when it is published:
//
//	publish   from the publish to the message durable (or refused); the
//	          copies queued carry its traceparent
//
// and each delivery of it a consumer span, the child of the publish span,
// whose traceparent the delivered message carries to the subscriber's turn:
//
//	deliver   one attempt, from the hand-off to the subscriber to its
//	          outcome (acknowledged, retry, poison, ...)
//
// An untraced message costs a string check: no span, no allocation.

// tracePublish starts the publish span of m, a message about to be queued
// on topic t, if m is part of a trace; m then carries the span. It returns
// the function that ends the span, or nil.
func (s *Service) tracePublish(ctx context.Context, m *agentsilov1.AgentMessage, t Topic) func(error) {
	if m.GetTraceparent() == "" {
		return nil
	}
	_, span := s.tracer.Start(ctx, "publish", trace.SpanKindProducer, m,
		attribute.String("messaging.system", "agentsilo"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", t.String()),
		attribute.String("messaging.message.id", m.GetId()),
		attribute.String("agentsilo.from", m.GetFrom()))
	return func(err error) { tracing.End(span, err) }
}

// traceDeliver starts the deliver span of msg, one attempt of subscription
// sub's delivery to its member msg.To, if msg is part of a trace (the
// publish span's child); msg then carries the span to the subscriber. It
// returns the function that ends the span with the outcome, or nil.
func (s *Service) traceDeliver(ctx context.Context, sub string, msg *agentsilov1.AgentMessage) func(error) {
	if msg.GetTraceparent() == "" {
		return nil
	}
	_, span := s.tracer.Start(ctx, "deliver", trace.SpanKindConsumer, msg,
		attribute.String("messaging.system", "agentsilo"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", msg.GetTopic()),
		attribute.String("messaging.destination.subscription.name", sub),
		attribute.String("messaging.message.id", msg.GetId()),
		attribute.String("agentsilo.attempt", strconv.Itoa(int(msg.GetAttempt()))))
	return func(err error) { tracing.End(span, err) }
}
