package llm

import (
	"encoding/json"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
)

// The durable record. A model agent keeps one JSON value in its state
// (grain's state store, with etags): the conversation and the turn in
// progress. The loop saves it after every step, before taking the next:
//
//   - a turn starts: the caller's message is appended and Current set
//     (for a request, whose caller waits and may retry, this is saved
//     with the first model response: a crash before it has done nothing
//     a retry would repeat);
//   - each model response with tool calls is appended (Current.Rounds
//     counts them) before any of its tool calls runs;
//   - each tool result is appended as it arrives;
//   - a turn ends: its last response, its summary, and its answer under
//     the request's idempotency key, are recorded and Current is cleared.
//
// A new activation reads the record and resumes Current from where it
// stands: a recorded response is never asked for again; a call without a
// recorded result runs (again, if it was running when the activation
// died: its Ask carries the same idempotency key, so a callee that saves
// state applies it once).

// Conversation is what a model agent records and its conversation skill
// returns, as JSON.
type Conversation struct {
	// Messages are the conversation, oldest first (the system prompt is
	// the definition's, not part of it); each names its turn.
	Messages []Message `json:"messages,omitempty"`
	// Turns summarises the turns that ended, oldest first.
	Turns []TurnSummary `json:"turns,omitempty"`
	// Current is the turn in progress, if any.
	Current *Turn `json:"current,omitempty"`
	// Answers are the last turns' outcomes by the idempotency key of the
	// request that started them, so that a retried request gets the one
	// answer.
	Answers []Answer `json:"answers,omitempty"`
	// Usage counts the tokens of every model call of the agent.
	Usage Usage `json:"usage"`
	// Decisions are the approvals of the last turns that ended, oldest
	// first: who decided what, when and why.
	Decisions []Approval `json:"decisions,omitempty"`
	// Context, for the agent of one context of a model agent (see
	// ConversationSettings.Key), is that context: the A2A contextId, or
	// the MCP session, its first turn came in.
	Context string `json:"context,omitempty"`
	// Summary, if the definition trims by summarising, folds the turns
	// that left Messages.
	Summary *Summary `json:"summary,omitempty"`
	// Scheduled holds, by schedule reminder, the last firing a turn was
	// started for: a tick again for it (a reminder delivers at least
	// once) starts none.
	Scheduled map[string]time.Time `json:"scheduled,omitempty"`
}

// Summary is the model's summary of the turns trimmed from a
// conversation (see ConversationSettings.Trim).
type Summary struct {
	Text string `json:"text"`
	// Turns counts the turns it folds; Through is the last of them.
	Turns   int    `json:"turns"`
	Through string `json:"through"`
	// At is when it was made, in the turn Turn; Usage is what making it
	// (every summary so far) cost.
	At    time.Time `json:"at"`
	Turn  string    `json:"turn"`
	Usage Usage     `json:"usage"`
	// Label and Outside are the least trusted content it folds (see
	// Message.Label): a summary of a tool's output is tool-output, and is
	// fenced as such in the system prompt.
	Label   string `json:"label,omitempty"`
	Outside bool   `json:"outside,omitempty"`
}

// maxContext bounds the context recorded.
const maxContext = 256

// maxScheduled bounds Conversation.Scheduled (the oldest firings go).
const maxScheduled = 64

// fired records that a turn started for the firing at of the schedule
// reminder name.
func (c *Conversation) fired(name string, at time.Time) {
	if c.Scheduled == nil {
		c.Scheduled = make(map[string]time.Time)
	}
	c.Scheduled[name] = at
	for len(c.Scheduled) > maxScheduled {
		oldest := ""
		for n, t := range c.Scheduled {
			if oldest == "" || t.Before(c.Scheduled[oldest]) {
				oldest = n
			}
		}
		delete(c.Scheduled, oldest)
	}
}

// Turn is a turn in progress.
type Turn struct {
	ID string `json:"id"`
	// Key is the idempotency key of the request that started it.
	Key string `json:"key,omitempty"`
	// From is the caller; Principal the principal its call chain is on
	// behalf of.
	From      string `json:"from,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Trigger is what started the turn: "" for a request (its caller
	// waits for the answer), else TriggerEvent, TriggerMessage,
	// TriggerTopic or TriggerSchedule; ReplyTo is where the answer of
	// such a turn goes ("" for nowhere).
	Trigger string    `json:"trigger,omitempty"`
	ReplyTo string    `json:"reply_to,omitempty"`
	Started time.Time `json:"started"`
	// Deadline is Started plus the definition's timeout: it holds across
	// restarts.
	Deadline time.Time `json:"deadline"`
	// Start is the index of the turn's first message in Messages.
	Start int `json:"start"`
	// Rounds counts the model responses recorded in the turn.
	Rounds int   `json:"rounds"`
	Usage  Usage `json:"usage"`
	// Approvals are the turn's tool calls that needed a person's
	// decision, waiting or decided; ParkedAt is when the turn began to
	// wait for the ones waiting (zero when it does not wait).
	Approvals []Approval `json:"approvals,omitempty"`
	ParkedAt  time.Time  `json:"parked_at,omitzero"`
}

// TurnSummary is a turn that ended.
type TurnSummary struct {
	ID      string    `json:"id"`
	Key     string    `json:"key,omitempty"`
	From    string    `json:"from,omitempty"`
	Trigger string    `json:"trigger,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	Rounds  int       `json:"rounds"`
	Usage   Usage     `json:"usage"`
	// Error is why the turn ended without an answer ("" if it answered).
	Error string `json:"error,omitempty"`
}

// Answer is a turn's outcome, kept by its request's idempotency key.
type Answer struct {
	Key string `json:"key"`
	// Principal started the turn: the key is the principal's, and only
	// its requests get the answer.
	Principal string `json:"principal,omitempty"`
	Turn      string `json:"turn"`
	Text      string `json:"text,omitempty"`
	// Code and Error are the turn's error, if it ended with one.
	Code  codes.Code `json:"code,omitempty"`
	Error string     `json:"error,omitempty"`

	// err is the error itself, with its causes, for the caller of the
	// turn that ended with it (a retry gets one made of Code and Error).
	err error
	// pending, if not empty, says the turn has not ended: it waits for
	// these approvals.
	pending []Approval
	// label and outside are the answer's content label: agent-message, or
	// lower, as the least trusted content the model read.
	label   grain.Label
	outside bool
}

// maxAnswers bounds the answers kept by key.
const maxAnswers = 64

// answer returns the recorded answer of principal's key.
func (c *Conversation) answer(key, principal string) (Answer, bool) {
	if key == "" {
		return Answer{}, false
	}
	for i := len(c.Answers) - 1; i >= 0; i-- {
		if c.Answers[i].Key == key && c.Answers[i].Principal == principal {
			return c.Answers[i], true
		}
	}
	return Answer{}, false
}

// turnMessages are the current turn's messages.
func (c *Conversation) turnMessages() []Message {
	if c.Current == nil || c.Current.Start > len(c.Messages) {
		return nil
	}
	return c.Messages[c.Current.Start:]
}

// pending returns the last assistant message of the turn, if it is the
// last but for tool results, and its calls without a recorded result.
func (c *Conversation) pending() (last *Message, calls []ToolCall) {
	msgs := c.turnMessages()
	done := make(map[string]bool)
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		switch m.Role {
		case RoleTool:
			done[m.ToolCallID] = true
			continue
		case RoleAssistant:
			for _, call := range m.ToolCalls {
				if !done[call.ID] {
					calls = append(calls, call)
				}
			}
			return m, calls
		}
		return nil, nil
	}
	return nil, nil
}

// estimateTokens estimates the tokens of msgs: one per four bytes of
// their text, tool arguments and names.
func estimateTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Text) + len(m.Name)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return (n + 3) / 4
}

// overBudget returns how many of the messages before the current turn's
// (whole turns, oldest first) must go so that those left are estimated at
// no more than half of max tokens; 0 when they fit in max.
func (c *Conversation) overBudget(max int) int {
	before := len(c.Messages)
	if c.Current != nil {
		before = min(c.Current.Start, len(c.Messages))
	}
	if max <= 0 || estimateTokens(c.Messages[:before]) <= max {
		return 0
	}
	n := 0
	for n < before && estimateTokens(c.Messages[n:before]) > max/2 {
		first := c.Messages[n].Turn
		for n < before && c.Messages[n].Turn == first {
			n++
		}
	}
	return n
}

// drop removes the first n messages (whole turns before the current
// one), keeping the current turn's start right.
func (c *Conversation) drop(n int) {
	c.Messages = slices.Clone(c.Messages[n:])
	if c.Current != nil {
		c.Current.Start -= n
	}
}

// trim drops the oldest whole turns until the record encodes in max
// bytes (the last turn stays whatever its size). Call it between turns.
func (c *Conversation) trim(max int) {
	for len(c.Messages) > 0 {
		b, err := json.Marshal(c)
		if err != nil || len(b) <= max {
			return
		}
		first := c.Messages[0].Turn
		n := 0
		for n < len(c.Messages) && c.Messages[n].Turn == first {
			n++
		}
		if n == len(c.Messages) {
			return
		}
		c.Messages = append([]Message(nil), c.Messages[n:]...)
		if len(c.Turns) > 0 && c.Turns[0].ID == first {
			c.Turns = c.Turns[1:]
		}
	}
}
