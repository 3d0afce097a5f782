package llm

import "context"

// The steps of a turn, each recorded in the agent's state before the next
// is taken (see Conversation).
const (
	// stepStarted: the caller's message is recorded and the turn is current.
	stepStarted = "started"
	// stepModel: a model response is recorded, before its tool calls run.
	stepModel = "model"
	// stepTool: a tool call's result is recorded.
	stepTool = "tool"
)

// stepHook, when set, is called after each step is recorded, on the
// turn's goroutine. Only a silo built for fault tests sets it (to hold a
// turn at a step while the test kills the silo); it is nil otherwise.
var stepHook func(ctx context.Context, step string)

func afterStep(ctx context.Context, step string) {
	if stepHook != nil {
		stepHook(ctx, step)
	}
}
