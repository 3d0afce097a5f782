package llmtest

import "time"

// Loop answers any conversation in the shape of one tool loop, for
// NewFunc: to a request whose last message is the user's it calls Tool
// with Arguments; to one whose last message is a tool's result it answers
// with Answer followed by that result (within its data marks). So every turn is two model calls
// and one tool call, whatever the conversation before it, and many
// conversations can share one server:
//
//	srv := llmtest.NewFunc(llmtest.Loop{Tool: "count", Arguments: `{}`, Latency: 50 * time.Millisecond}.Respond)
//
// Respond is safe for concurrent use.
type Loop struct {
	// Tool and Arguments are the tool call of a turn's first response.
	Tool, Arguments string
	// Answer prefixes the tool's result in a turn's answer. Default
	// "done: ".
	Answer string
	// Latency holds each answer that long (Step.Delay).
	Latency time.Duration
}

// Respond is the step answering r.
func (l Loop) Respond(r Request) Step {
	last := r.LastMessage()
	if last.Role == "tool" {
		answer := l.Answer
		if answer == "" {
			answer = "done: "
		}
		return Step{Text: answer + last.Data, Delay: l.Latency}
	}
	return Step{ToolCalls: []ToolCall{{Name: l.Tool, Arguments: l.Arguments}}, Delay: l.Latency}
}
