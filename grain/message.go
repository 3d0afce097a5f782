package grain

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Message is agentsilo's one message type (see proto/agentsilo/v1).
type Message = agentsilov1.AgentMessage

// The kinds of message.
const (
	KindRequest  = agentsilov1.Kind_KIND_REQUEST
	KindOneWay   = agentsilov1.Kind_KIND_ONE_WAY
	KindEvent    = agentsilov1.Kind_KIND_EVENT
	KindResponse = agentsilov1.Kind_KIND_RESPONSE
)

// ReservedPrefix starts the message types reserved for the runtime.
const ReservedPrefix = "_silo."

// Text returns a message with the given text body.
func Text(text string) *Message { return &Message{Message: text} }

// StateProvisional is the key, in a reply's State, that Provisional sets.
const StateProvisional = ReservedPrefix + "provisional"

// Provisional marks r, a reply, as not its request's final answer (a model
// agent's reply that its turn waits for a person's approval is one): the
// runtime does not keep it as the answer of the request's idempotency key,
// so a retry with the key reaches the agent again. It returns r.
func Provisional(r *Message) *Message {
	if r.State == nil {
		r.State = make(map[string]string, 1)
	}
	r.State[StateProvisional] = "true"
	return r
}

// IsReserved reports whether messageType is reserved for the runtime.
func IsReserved(messageType string) bool { return strings.HasPrefix(messageType, ReservedPrefix) }

// NewID returns a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then
// random bits. The random bits come from the runtime's fast per-thread source:
// ids must be unique and time-ordered, not secret.
func NewID() string { return newIDAt(time.Now().UnixNano()) }

// newIDAt is NewID for a clock reading the caller already has (Unix ns).
func newIDAt(unixNano int64) string {
	var s [36]byte
	putID(&s, unixNano)
	return string(s[:])
}

// newIDPair returns two ids, for a request and its reply, in one allocation.
func newIDPair(unixNano int64) (string, string) {
	var s [72]byte
	putID((*[36]byte)(s[:36]), unixNano)
	putID((*[36]byte)(s[36:]), unixNano)
	var b strings.Builder
	b.Grow(len(s))
	b.Write(s[:])
	both := b.String() // no copy: one allocation for the two
	return both[:36], both[36:]
}

// putID writes a UUIDv7 for unixNano to s.
func putID(s *[36]byte, unixNano int64) {
	var b [16]byte
	ms := uint64(unixNano / 1e6)
	r1, r2 := rand.Uint64(), rand.Uint64()
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(r1>>60)&0x0f // version 7
	b[7] = byte(r1 >> 52)
	b[8] = 0x80 | byte(r1>>46)&0x3f // variant 10
	for i := 9; i < 16; i++ {
		b[i] = byte(r2 >> (8 * (i - 9)))
	}
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
}

// approxSize is a cheap upper-bound-ish estimate of a message's wire size,
// used to skip exact sizing on the hot path for small messages.
func approxSize(m *Message) int {
	n := len(m.Message) + len(m.Data) + len(m.To) + len(m.From) + len(m.MessageType) + 64
	for _, f := range m.Files {
		n += len(f) + 2
	}
	for k, v := range m.State {
		n += len(k) + len(v) + 6
	}
	return n
}

// Label is a message's content label (Message.Label): where its content
// comes from, and so how far a model may trust it (see docs/trust.md).
type Label = agentsilov1.ContentLabel

// The content labels, from the most trusted to the least.
const (
	// LabelSystem: the operator's words (a model agent's prompt); never
	// on a message a client or an agent sends.
	LabelSystem = agentsilov1.ContentLabel_CONTENT_LABEL_SYSTEM
	// LabelUserInput: what a client of the gateway sent.
	LabelUserInput = agentsilov1.ContentLabel_CONTENT_LABEL_USER_INPUT
	// LabelAgentMessage: what an agent wrote (Message.Outside: an agent
	// outside the cluster).
	LabelAgentMessage = agentsilov1.ContentLabel_CONTENT_LABEL_AGENT_MESSAGE
	// LabelToolRequest: a tool call a model wrote, as the tool gets it.
	LabelToolRequest = agentsilov1.ContentLabel_CONTENT_LABEL_TOOL_REQUEST
	// LabelToolOutput: a tool's result.
	LabelToolOutput = agentsilov1.ContentLabel_CONTENT_LABEL_TOOL_OUTPUT
)

// ParseLabel reads a label's name ("user-input", "tool-output", ...); ok
// is false for any other text. Label.Name is the other way.
func ParseLabel(name string) (l Label, ok bool) { return agentsilov1.ParseContentLabel(name) }

// LabelKey is the key, in an A2A part's metadata and an MCP result's
// _meta, of the content's label's name ("user-input", "tool-output", ...);
// OutsideKey, beside it, is true for content from outside the cluster.
const (
	LabelKey   = "agentsilo.label"
	OutsideKey = "agentsilo.outside"
)

// capLabel stamps msg, sent (or replied) by an agent while it handles in
// (nil outside a turn): its label is LabelAgentMessage if it names none,
// no more trusted than LabelUserInput, nor than in's (a tool request
// counting as an agent's message: what the agent sends on is its own
// words, unless what it read was a tool's output); it is from outside the
// cluster if in is.
func capLabel(msg, in *Message) {
	l := msg.Label
	if l == 0 {
		l = LabelAgentMessage
	}
	l = l.Lower(LabelUserInput)
	if in != nil {
		read := in.Label
		if read == LabelToolRequest {
			read = LabelAgentMessage
		}
		l = l.Lower(read)
		msg.Outside = msg.Outside || in.Outside
	}
	msg.Label = l
}
