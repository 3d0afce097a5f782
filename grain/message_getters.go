package grain

// TEMPORARY: getters while callers move to fields; removed by the rewrite.

func (m *Message) GetID() string {
	if m == nil {
		return ""
	}
	return m.ID
}

func (m *Message) GetTo() string {
	if m == nil {
		return ""
	}
	return m.To
}

func (m *Message) GetFrom() string {
	if m == nil {
		return ""
	}
	return m.From
}

func (m *Message) GetOnBehalfOf() string {
	if m == nil {
		return ""
	}
	return m.OnBehalfOf
}

func (m *Message) GetChannel() string {
	if m == nil {
		return ""
	}
	return m.Channel
}

func (m *Message) GetMessageType() string {
	if m == nil {
		return ""
	}
	return m.MessageType
}

func (m *Message) GetMessage() string {
	if m == nil {
		return ""
	}
	return m.Message
}

func (m *Message) GetKind() Kind {
	if m == nil {
		return 0
	}
	return m.Kind
}

func (m *Message) GetDataType() string {
	if m == nil {
		return ""
	}
	return m.DataType
}

func (m *Message) GetData() []byte {
	if m == nil {
		return nil
	}
	return m.Data
}

func (m *Message) GetFiles() []string {
	if m == nil {
		return nil
	}
	return m.Files
}

func (m *Message) GetState() map[string]string {
	if m == nil {
		return nil
	}
	return m.State
}

func (m *Message) GetCorrelationID() string {
	if m == nil {
		return ""
	}
	return m.CorrelationID
}

func (m *Message) GetTopic() string {
	if m == nil {
		return ""
	}
	return m.Topic
}

func (m *Message) GetSubscription() string {
	if m == nil {
		return ""
	}
	return m.Subscription
}

func (m *Message) GetAttempt() uint32 {
	if m == nil {
		return 0
	}
	return m.Attempt
}

func (m *Message) GetIdempotencyKey() string {
	if m == nil {
		return ""
	}
	return m.IdempotencyKey
}

func (m *Message) GetLabel() Label {
	if m == nil {
		return 0
	}
	return m.Label
}

func (m *Message) GetOutside() bool {
	if m == nil {
		return false
	}
	return m.Outside
}
