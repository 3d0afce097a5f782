package llm

import (
	"context"

	"github.com/agentsilo/agentsilo/grain"
)

// liveRun is how a turn runs with its caller waiting: progress pushed to
// the caller if it is a client session.
func (a *agent) liveRun(cur *Turn) runContext {
	rc := runContext{}
	if addr, err := grain.Resolve(cur.From, ""); err == nil && addr.Type == grain.SessionType {
		rc.pushTo = cur.From
	}
	return rc
}

// pushProgress pushes a progress line to the turn's caller, if it is a
// client session; failures are not the turn's.
func (a *agent) push(ctx context.Context, rc runContext, typ, text string) {
	if rc.pushTo == "" {
		return
	}
	if err := a.h.Send(ctx, rc.pushTo, &grain.Message{MessageType: typ, Message: text}); err != nil {
		a.h.Logger().Debug("push progress", "to", rc.pushTo, "err", err)
	}
}
