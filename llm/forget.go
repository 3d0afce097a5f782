package llm

import (
	"context"
	"time"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"google.golang.org/grpc/codes"
)

// Deleting a conversation: by the forget skill (its owner, or a principal
// the ACL grants Configure on the agent), or when the definition's
// conversation.retention has passed since its last turn (a reminder).

const (
	// SkillForget deletes the agent's recorded conversation: a typed
	// skill taking {} and answering Forgotten. A turn in progress (or
	// waiting for approvals) is FailedPrecondition: nothing is deleted.
	SkillForget = "forget"
	// RetentionReminder names the reminder that deletes a conversation
	// idle for the definition's conversation.retention, and is the type
	// of its ticks. An activation that ends with a conversation recorded
	// registers it, due when the retention passes.
	RetentionReminder = "llm.retention"
)

// Forgotten is what the forget skill deleted.
type Forgotten struct {
	Messages int `json:"messages"`
	Turns    int `json:"turns"`
}

// forget handles the forget skill.
func (a *agent) forget(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	principal := principalOf(m)
	if err := a.h.Authorize(ctx, principal, "Configure"); err != nil {
		return nil, errs.Wrap(codes.PermissionDenied, err, "%s: only its owner, or a principal the ACL grants Configure on it, deletes its conversation, not %s; nothing was deleted", a.h.Address(), clipText(principal, 128))
	}
	if !a.enter() {
		return nil, errs.New(codes.FailedPrecondition, "%s is in a turn: its conversation is deleted between turns; nothing was deleted", a.h.Address())
	}
	defer a.leave()
	f, err := a.erase(ctx, principal)
	if err != nil {
		return nil, err
	}
	return grain.JSONReply(m, f)
}

// erase deletes the record between turns, and records it in the audit:
// principal asked for it ("" for the retention).
func (a *agent) erase(ctx context.Context, principal string) (Forgotten, error) {
	if a.stale {
		if err := a.load(ctx); err != nil {
			return Forgotten{}, err
		}
	}
	if cur := a.rec.Current; cur != nil {
		return Forgotten{}, errs.New(codes.FailedPrecondition, "%s: turn %s has not ended (it runs, or waits for approvals): its conversation is deleted between turns; nothing was deleted", a.h.Address(), cur.ID)
	}
	a.mu.Lock()
	f := Forgotten{Messages: len(a.rec.Messages), Turns: len(a.rec.Turns)}
	etag := a.etag
	a.mu.Unlock()
	if etag != "" {
		if err := a.h.DeleteState(stateContext{ctx}, etag); err != nil {
			a.stale = true
			return Forgotten{}, err
		}
		a.auditForget(ctx, principal, etag, f)
	}
	a.mu.Lock()
	a.rec, a.etag = Conversation{}, ""
	a.mu.Unlock()
	if a.t.def.Conversation.Retention > 0 {
		if err := a.h.UnregisterReminder(ctx, RetentionReminder); err != nil && errs.Code(err) != codes.NotFound {
			a.h.Logger().Debug("remove the retention reminder", "err", err)
		}
	}
	return f, nil
}

// lastActive is when the conversation last had a turn (zero if never).
func (c *Conversation) lastActive() time.Time {
	var t time.Time
	if n := len(c.Turns); n > 0 {
		t = c.Turns[n-1].Ended
	}
	if c.Summary != nil && c.Summary.At.After(t) {
		t = c.Summary.At
	}
	return t
}

// keep registers the retention reminder, due when the retention passes
// after the last turn, if the conversation holds anything.
func (a *agent) keep(ctx context.Context) {
	keep := time.Duration(a.t.def.Conversation.Retention)
	if keep <= 0 || a.stale || a.rec.Current != nil || (len(a.rec.Messages) == 0 && len(a.rec.Turns) == 0) {
		return
	}
	due := max(a.rec.lastActive().Add(keep).Sub(a.t.opts.clk.Now()), time.Second)
	if err := a.h.RegisterReminder(ctx, RetentionReminder, due, keep, RetentionReminder, ""); err != nil {
		a.h.Logger().Warn("no reminder to delete the conversation when its retention passes", "err", err)
	}
}

// expire handles a tick of the retention reminder: a conversation idle
// for the retention is deleted; one that was active since is kept, the
// reminder due again when its retention passes.
func (a *agent) expire(ctx context.Context) {
	if !a.enter() {
		return
	}
	defer a.leave()
	if a.stale {
		if err := a.load(ctx); err != nil {
			a.h.Logger().Warn("retention: load the conversation", "err", err)
			return
		}
	}
	keep := time.Duration(a.t.def.Conversation.Retention)
	if keep <= 0 {
		if err := a.h.UnregisterReminder(ctx, RetentionReminder); err != nil && errs.Code(err) != codes.NotFound {
			a.h.Logger().Debug("remove the retention reminder", "err", err)
		}
		return
	}
	if a.rec.Current != nil {
		return // a turn runs or waits: the reminder comes back
	}
	if a.rec.lastActive().Add(keep).After(a.t.opts.clk.Now()) {
		a.keep(ctx)
		return
	}
	f, err := a.erase(ctx, "")
	if err != nil {
		a.h.Logger().Warn("retention: delete the conversation", "err", err)
		return
	}
	a.h.Logger().Info("deleted a conversation idle past its retention", "retention", keep, "messages", f.Messages, "turns", f.Turns)
	a.h.Deactivate()
}
