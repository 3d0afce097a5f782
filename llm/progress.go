package llm

import (
	"context"

	"github.com/agentsilo/agentsilo/grain"
)

// Where a turn's progress goes. While a turn runs with its caller
// waiting, each model call and tool call (ProgressType) and, when
// streaming, each piece of the model's text (ProgressDelta) is pushed to
// the caller, a one-way message to the turn's sender, if the sender is
// one that takes pushes:
//
//	a client session (Session:<principal>:<id>@<silo>)   the SDK's
//	    session, which hands pushes to the program (client ask prints
//	    them on stderr)
//	an A2A turn's inbox (Session:<principal>:a2a-<id>@<silo>)   each push
//	    a working status update of the task (message/stream's server-sent
//	    events, and the task's history), its text the push's, its
//	    metadata naming the kind (StateProgress)
//	an MCP call's inbox (Session:<principal>:mcp-<id>@<silo>)   each push
//	    a progress notification, when the call has a progress token
//
// Another agent asking, a reminder or a schedule takes no pushes. A push
// that fails (the caller went, its backlog is full) is not the turn's
// failure.

// StateProgress is the state key that names, on a pushed message, its
// kind: ProgressType or ProgressDelta (A2A's callers see it as the status
// message's metadata, where the message type does not go).
const StateProgress = "llm.progress"

// liveRun is how a turn runs with its caller waiting: progress pushed to
// the caller if it takes pushes (see above).
func (a *agent) liveRun(cur *Turn) runContext {
	rc := runContext{}
	if takesPushes(cur.From) {
		rc.pushTo = cur.From
	}
	return rc
}

// takesPushes reports whether from, a turn's sender, takes its progress:
// a client session, or the inbox of an A2A or MCP call (an inbox address
// is a session address too; see internal/inbox).
func takesPushes(from string) bool {
	addr, err := grain.Resolve(from, "")
	return err == nil && addr.Type == grain.SessionType
}

// push pushes a line of progress (typ ProgressType) or a piece of the
// model's text (ProgressDelta) to the turn's caller, if it takes pushes;
// failures are not the turn's.
func (a *agent) push(ctx context.Context, rc runContext, typ, text string) {
	if rc.pushTo == "" {
		return
	}
	msg := &grain.Message{MessageType: typ, Message: text, State: map[string]string{StateProgress: typ}}
	if err := a.h.Send(ctx, rc.pushTo, msg); err != nil {
		a.h.Logger().Debug("push progress", "to", rc.pushTo, "err", err)
	}
}
