package agentsilov1

// Response builds the reply to m: the request's id becomes correlation_id, to
// and from are swapped, the trace context and call chain are kept, and the
// kind is RESPONSE. The caller fills in the body.
func (m *AgentMessage) Response() *AgentMessage {
	return &AgentMessage{
		To:            m.GetFrom(),
		From:          m.GetTo(),
		OnBehalfOf:    m.GetOnBehalfOf(),
		Channel:       m.GetChannel(),
		MessageType:   m.GetMessageType(),
		Kind:          Kind_KIND_RESPONSE,
		CorrelationId: m.GetId(),
		Traceparent:   m.GetTraceparent(),
		CallChainId:   m.GetCallChainId(),
	}
}
