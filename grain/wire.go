package grain

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// A message leaves a process as the wire's AgentMessage and enters one
// from it: this file converts. The conversion shares strings and byte
// slices with its source (neither side changes them once sent), so it
// costs one allocation, the new value.

// toWire returns m's wire form, with the trace context and call chain the
// runtime carries beside m's fields.
func toWire(m *Message) *agentsilov1.AgentMessage {
	if m == nil {
		return nil
	}
	return &agentsilov1.AgentMessage{
		Id:             m.ID,
		To:             m.To,
		From:           m.From,
		OnBehalfOf:     m.OnBehalfOf,
		Channel:        m.Channel,
		MessageType:    m.MessageType,
		Message:        m.Message,
		Kind:           agentsilov1.Kind(m.Kind),
		DataType:       m.DataType,
		Data:           m.Data,
		Files:          m.Files,
		State:          m.State,
		CorrelationId:  m.CorrelationID,
		Traceparent:    m.traceparent,
		Attempt:        m.Attempt,
		CallChainId:    m.chain,
		Topic:          m.Topic,
		Subscription:   m.Subscription,
		IdempotencyKey: m.IdempotencyKey,
		Label:          agentsilov1.ContentLabel(m.Label),
		Outside:        m.Outside,
	}
}

// fromWire returns the message w carries, with its trace context and call
// chain (its deadline is the context's, which the transport sets).
func fromWire(w *agentsilov1.AgentMessage) *Message {
	if w == nil {
		return nil
	}
	return &Message{
		ID:             w.Id,
		To:             w.To,
		From:           w.From,
		OnBehalfOf:     w.OnBehalfOf,
		Channel:        w.Channel,
		MessageType:    w.MessageType,
		Message:        w.Message,
		Kind:           Kind(w.Kind),
		DataType:       w.DataType,
		Data:           w.Data,
		Files:          w.Files,
		State:          w.State,
		CorrelationID:  w.CorrelationId,
		Topic:          w.Topic,
		Subscription:   w.Subscription,
		Attempt:        w.Attempt,
		IdempotencyKey: w.IdempotencyKey,
		Label:          Label(w.Label),
		Outside:        w.Outside,
		traceparent:    w.Traceparent,
		chain:          w.CallChainId,
	}
}

// MessageToProto returns m's wire form (proto/agentsilo/v1), for code that
// speaks the wire protocol itself: a transport, a store that keeps
// messages as protobuf. Agents and SDK users never need it. The result
// shares m's strings, byte slices and maps.
func MessageToProto(m *Message) *agentsilov1.AgentMessage { return toWire(m) }

// MessageFromProto is MessageToProto's inverse. The wire's deadline is not
// kept: the receiver's context carries it.
func MessageFromProto(w *agentsilov1.AgentMessage) *Message { return fromWire(w) }

// wireSize is the size of m's wire form in bytes.
func wireSize(m *Message) int { return proto.Size(toWire(m)) }

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	if m == nil {
		return nil
	}
	c := *m
	c.Data = slices.Clone(m.Data)
	c.Files = slices.Clone(m.Files)
	c.State = maps.Clone(m.State)
	return &c
}

// Response returns the reply to m: the request's id becomes
// CorrelationId, To and From are swapped, and the kind is KindResponse,
// on the request's call chain and trace. The caller fills in the body.
func (m *Message) Response() *Message {
	return &Message{
		To:            m.From,
		From:          m.To,
		OnBehalfOf:    m.OnBehalfOf,
		Channel:       m.Channel,
		MessageType:   m.MessageType,
		Kind:          KindResponse,
		CorrelationID: m.ID,
		traceparent:   m.traceparent,
		chain:         m.chain,
	}
}
