package grain

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Message is what agents and clients send each other: a request, its
// response, a one-way message or an event. It is a plain Go value; the
// runtime converts it to and from its wire form (proto/agentsilo/v1's
// AgentMessage) where it leaves or enters a process, and carries what only
// the wire needs (the trace context, the call chain, the deadline) beside
// it, not in it: a handler reads those from its context (Traceparent,
// ctx.Deadline).
//
// The runtime fills in the fields it owns: ID, From, OnBehalfOf and Kind
// on what is sent, CorrelationID on a response, Topic, Subscription and
// Attempt on a topic delivery.
type Message struct {
	// ID is the message's id, a UUIDv7 the runtime gives (see NewID).
	ID string
	// To is the address the message goes to (Type:owner:alias), absolute
	// or relative to the sender's owner (Type:alias).
	To string
	// From is the sender's address: an agent's or a client session's.
	From string
	// OnBehalfOf is the principal the message's call chain acts for: the
	// owner of the client or agent that started it.
	OnBehalfOf string
	// Channel is free for the application: a conversation or thread name.
	Channel string
	// MessageType names what the message asks for: a skill, or an
	// agent's own verb. Types starting with ReservedPrefix are the
	// runtime's.
	MessageType string
	// Message is the text body.
	Message string
	// Kind says whether this is a request, a response, a one-way message
	// or an event.
	Kind Kind
	// DataType names the encoding of Data ("application/json", ...).
	DataType string
	// Data is the binary body.
	Data []byte
	// Files are references to files (URIs) the message carries.
	Files []string
	// State carries small key-value pairs along with the message; keys
	// starting with ReservedPrefix are the runtime's.
	State map[string]string
	// CorrelationID is, on a response, the id of the request it answers.
	CorrelationID string
	// Topic is the topic a delivered message was published to ("" for a
	// message that is not a topic delivery).
	Topic string
	// Subscription is the subscription a topic delivery comes from.
	Subscription string
	// Attempt counts the deliveries of a topic message to its subscriber,
	// from 1.
	Attempt uint32
	// IdempotencyKey, if set, makes the runtime hand the message to its
	// receiver at most once within the idempotency window (a retry gets
	// the first answer).
	IdempotencyKey string
	// Label says where the message's content comes from (see Label).
	Label Label
	// Outside is true for content from outside the cluster (an outside
	// A2A agent's words, a web page an MCP tool fetched).
	Outside bool

	// traceparent is the W3C trace context the message carries (the
	// wire's traceparent); chain is its call chain (call_chain_id).
	traceparent string
	chain       string
}

// Kind is a message's kind.
type Kind int32

// The kinds of message. Their values are the wire's.
const (
	KindUnspecified Kind = 0
	KindRequest     Kind = 1
	KindOneWay      Kind = 2
	KindEvent       Kind = 3
	KindResponse    Kind = 4
)

// String returns the kind's name as the wire names it ("KIND_REQUEST").
func (k Kind) String() string { return agentsilov1.Kind(k).String() }

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
// The zero Label is unspecified.
type Label int32

// The content labels, from the most trusted to the least. Their values
// are the wire's.
const (
	// LabelSystem: the operator's words (a model agent's prompt); never
	// on a message a client or an agent sends.
	LabelSystem Label = 1
	// LabelUserInput: what a client of the gateway sent.
	LabelUserInput Label = 2
	// LabelAgentMessage: what an agent wrote (Message.Outside: an agent
	// outside the cluster).
	LabelAgentMessage Label = 3
	// LabelToolRequest: a tool call a model wrote, as the tool gets it.
	LabelToolRequest Label = 4
	// LabelToolOutput: a tool's result.
	LabelToolOutput Label = 5
)

// ParseLabel reads a label's name ("user-input", "tool-output", ...); ok
// is false for any other text. Label.Name is the other way.
func ParseLabel(name string) (l Label, ok bool) {
	w, ok := agentsilov1.ParseContentLabel(name)
	return Label(w), ok
}

// Name is l as people write it: "system", "user-input", "agent-message",
// "tool-request", "tool-output" ("" for an unspecified label, or a value
// this version does not know).
func (l Label) Name() string { return agentsilov1.ContentLabel(l).Name() }

// String returns the label's name as the wire names it
// ("CONTENT_LABEL_TOOL_OUTPUT").
func (l Label) String() string { return agentsilov1.ContentLabel(l).String() }

// Known reports whether l is one of the labels this version knows.
func (l Label) Known() bool { return agentsilov1.ContentLabel(l).Known() }

// Lower returns the less trusted of l and o (an unspecified one is
// ignored; a value this version does not know counts as LabelToolOutput).
func (l Label) Lower(o Label) Label {
	return Label(agentsilov1.ContentLabel(l).Lower(agentsilov1.ContentLabel(o)))
}

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

// Untrusted reports whether content with label l (from outside the cluster
// if outside) is untrusted: a tool's output, or anything from outside the
// cluster. A model agent whose model has read untrusted content may not
// call a sensitive tool without a person's approval.
func (l Label) Untrusted(outside bool) bool { return agentsilov1.ContentLabel(l).Untrusted(outside) }
