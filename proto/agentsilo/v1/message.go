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

// labelNames are the labels' names as people and other protocols (A2A
// part metadata, MCP result _meta) write them.
var labelNames = [...]string{
	ContentLabel_CONTENT_LABEL_UNSPECIFIED:   "",
	ContentLabel_CONTENT_LABEL_SYSTEM:        "system",
	ContentLabel_CONTENT_LABEL_USER_INPUT:    "user-input",
	ContentLabel_CONTENT_LABEL_AGENT_MESSAGE: "agent-message",
	ContentLabel_CONTENT_LABEL_TOOL_REQUEST:  "tool-request",
	ContentLabel_CONTENT_LABEL_TOOL_OUTPUT:   "tool-output",
}

// Name is l as people write it: "system", "user-input", "agent-message",
// "tool-request", "tool-output" ("" for UNSPECIFIED, or a value this
// version does not know).
func (l ContentLabel) Name() string {
	if l < 0 || int(l) >= len(labelNames) {
		return ""
	}
	return labelNames[l]
}

// ParseContentLabel reads a label's Name; ok is false for any other text.
func ParseContentLabel(s string) (l ContentLabel, ok bool) {
	for i, n := range labelNames {
		if n != "" && n == s {
			return ContentLabel(i), true
		}
	}
	return ContentLabel_CONTENT_LABEL_UNSPECIFIED, false
}

// Known reports whether l is one of the labels this version knows (not
// UNSPECIFIED).
func (l ContentLabel) Known() bool {
	return l > ContentLabel_CONTENT_LABEL_UNSPECIFIED && l <= ContentLabel_CONTENT_LABEL_TOOL_OUTPUT
}

// Lower returns the less trusted of l and o (an UNSPECIFIED one is
// ignored; a value this version does not know counts as TOOL_OUTPUT).
func (l ContentLabel) Lower(o ContentLabel) ContentLabel {
	l, o = l.known(), o.known()
	if l == ContentLabel_CONTENT_LABEL_UNSPECIFIED || o > l {
		return o
	}
	return l
}

func (l ContentLabel) known() ContentLabel {
	if l != ContentLabel_CONTENT_LABEL_UNSPECIFIED && !l.Known() {
		return ContentLabel_CONTENT_LABEL_TOOL_OUTPUT
	}
	return l
}

// Untrusted reports whether content labelled l (from outside the cluster
// if outside) is untrusted: a tool's output, or anything from outside the
// cluster (an outside agent's message, an A2A or MCP client's request). A
// model agent whose model has read untrusted content may not call a
// sensitive tool without a person's approval.
func (l ContentLabel) Untrusted(outside bool) bool {
	return outside || l.known() == ContentLabel_CONTENT_LABEL_TOOL_OUTPUT
}
