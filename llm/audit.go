package llm

import (
	"context"
	"strconv"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// The audit records of model agents (see docs/audit.md). A tool call's
// record is appended after the call returns and before its result is
// saved, keyed by the agent, turn, round and call id: a call that never
// ran has none; a call run again after a crash (its result was not saved)
// carries the same key, so its record is written once.

// WithAudit makes the agents record their tool calls, approvals and
// decisions, and conversations deleted, in l. Without it, agents on a
// silo record in the silo's audit log (if it is on), whether their type
// was registered in code or declared; WithAudit(nil) records nothing.
func WithAudit(l *audit.Log) Option {
	return optionFunc(func(o *options) { o.audit, o.auditSet = l, true })
}

// auditLog is the log a's records go to: its type's (WithAudit), else its
// silo's.
func (a *agent) auditLog() *audit.Log {
	if a.t.opts.auditSet {
		return a.t.opts.audit
	}
	if h, ok := a.h.(siloapi.Audited); ok {
		return h.SiloAudit()
	}
	return nil
}

// chain is the on-behalf-of chain of cur: its principal, then its caller
// if another.
func chain(cur *Turn) []string {
	var out []string
	if cur.Principal != "" {
		out = append(out, cur.Principal)
	}
	if cur.From != "" && cur.From != cur.Principal {
		out = append(out, cur.From)
	}
	return out
}

func trigger(cur *Turn) string {
	if cur.Trigger == "" {
		return "request"
	}
	return cur.Trigger
}

// auditTool records the tool call r of round of cur; an error means it is
// not recorded, and the call's result must not be saved.
func (a *agent) auditTool(ctx context.Context, cur *Turn, round int, r toolResult) error {
	l := a.auditLog()
	if !l.Enabled() || !r.ran {
		return nil
	}
	addr := a.h.Address().String()
	rec := audit.Record{
		Key:         "tool/" + addr + "/" + cur.ID + "/" + strconv.Itoa(round) + "/" + r.call.ID,
		Kind:        audit.KindToolCall,
		Principal:   cur.Principal,
		OnBehalfOf:  chain(cur),
		Agent:       addr,
		Skill:       r.call.Name,
		Task:        cur.ID,
		Correlation: cur.Key,
		Trigger:     trigger(cur),
		Tokens:      cur.Usage.InputTokens + cur.Usage.OutputTokens,
		Outcome:     audit.OutcomeOK,
	}
	if ap := cur.approvalOf(r.call.ID); ap != nil {
		rec.Decision = ap.Decision
	}
	if r.err != nil {
		rec.Outcome, rec.Detail = audit.OutcomeError, errs.Code(r.err).String()+": "+r.err.Error()
	}
	if err := l.Append(ctx, rec); err != nil {
		return errs.Wrap(errs.Code(err), err, "%s: the audit record of tool call %s was not written (the call ran; its result is not saved, and the turn resumes later)", addr, r.call.ID)
	}
	return nil
}

// refusal is a call of a sensitive tool that gate refused (on_untrusted:
// refuse), and why.
type refusal struct {
	call ToolCall
	why  string
}

// Refused is the Decision of the audit record of a call of a sensitive
// tool that the definition refused to run (on_untrusted: refuse).
const Refused = "refused"

// auditRefused records the refused call r of cur; an error means it is not
// recorded, and the refusal must not be saved.
func (a *agent) auditRefused(ctx context.Context, cur *Turn, r refusal) error {
	l := a.auditLog()
	if !l.Enabled() {
		return nil
	}
	addr := a.h.Address().String()
	rec := audit.Record{
		Key:         "refused/" + addr + "/" + cur.ID + "/" + r.call.ID,
		Kind:        audit.KindToolCall,
		Principal:   cur.Principal,
		OnBehalfOf:  chain(cur),
		Agent:       addr,
		Skill:       r.call.Name,
		Task:        cur.ID,
		Correlation: cur.Key,
		Trigger:     trigger(cur),
		Decision:    Refused,
		Outcome:     audit.OutcomeError,
		Detail:      "not run: " + r.why + " (on_untrusted: refuse)",
		Tokens:      cur.Usage.InputTokens + cur.Usage.OutputTokens,
	}
	if err := l.Append(ctx, rec); err != nil {
		return errs.Wrap(errs.Code(err), err, "%s: the audit record of refused tool call %s was not written (the refusal is not saved, and the turn resumes later)", addr, r.call.ID)
	}
	return nil
}

// auditApprovals records the approvals of cur and their decisions that
// this activation has not recorded yet (a crash between an approval's
// save and its record leaves it to the next activation: the keys make a
// second record of either nothing). Failures are logged: the approval
// stays recorded in the conversation, and the next pass tries again.
func (a *agent) auditApprovals(ctx context.Context, cur *Turn) {
	l := a.auditLog()
	if !l.Enabled() {
		return
	}
	addr := a.h.Address().String()
	for _, ap := range cur.Approvals {
		base := audit.Record{Principal: cur.Principal, OnBehalfOf: chain(cur), Agent: addr, Skill: ap.Call.Name, Task: cur.ID, Correlation: ap.ID, Trigger: trigger(cur)}
		if !a.audited[ap.ID] {
			r := base
			r.Key, r.Kind, r.Time, r.Detail = "approval/"+ap.ID, audit.KindApproval, ap.Requested, "until "+ap.Deadline.UTC().Format("2006-01-02T15:04:05Z")
			if err := l.Append(ctx, r); err != nil {
				a.h.Logger().Warn("audit: an approval is not recorded yet", "id", ap.ID, "err", err)
				continue
			}
			a.markAudited(ap.ID)
		}
		if ap.Decision != "" && !a.audited["decided/"+ap.ID] {
			r := base
			r.Key, r.Kind, r.Time, r.Decision, r.Detail = "decision/"+ap.ID, audit.KindDecision, ap.At, ap.Decision, ap.Reason
			if ap.By != "" {
				r.OnBehalfOf = []string{ap.By}
				r.Principal = ap.By
			} else {
				r.Detail = "the deadline decided: " + ap.Reason
			}
			if err := l.Append(ctx, r); err != nil {
				a.h.Logger().Warn("audit: a decision is not recorded yet", "id", ap.ID, "err", err)
				continue
			}
			a.markAudited("decided/" + ap.ID)
		}
	}
}

func (a *agent) markAudited(id string) {
	if a.audited == nil {
		a.audited = make(map[string]bool)
	}
	a.audited[id] = true
}

// auditForget records the deletion of the conversation at etag, by
// principal ("" when its retention deleted it).
func (a *agent) auditForget(ctx context.Context, principal, etag string, f Forgotten) {
	l := a.auditLog()
	if !l.Enabled() {
		return
	}
	addr := a.h.Address().String()
	r := audit.Record{Key: "forget/" + addr + "/" + etag, Kind: audit.KindConversationDelete, Agent: addr, Skill: SkillForget, Trigger: "request",
		Detail: strconv.Itoa(f.Messages) + " messages, " + strconv.Itoa(f.Turns) + " turns"}
	if principal != "" {
		r.Principal, r.OnBehalfOf = principal, []string{principal}
	} else {
		r.Trigger = "retention"
	}
	if err := l.Append(ctx, r); err != nil {
		a.h.Logger().Error("audit: a deleted conversation is not recorded", "err", err)
	}
}
