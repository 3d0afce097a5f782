package llm

import "context"

// The steps of a turn, each recorded in the agent's state before the next
// is taken (see Conversation).
const (
	// stepStarted: the message of a turn without a waiting caller is
	// recorded and the turn is current (a request's turn is recorded with
	// its first model response).
	stepStarted = "started"
	// stepModel: a model response with tool calls is recorded, before
	// they run (the last response is recorded with the turn's end).
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
