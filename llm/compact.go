package llm

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"google.golang.org/grpc/codes"
)

// Keeping a conversation within its token budget. Before a turn's first
// model request, the earlier turns are measured against the definition's
// conversation.max_tokens; past it, the oldest whole turns go until half
// the budget is left. With trim: summarize, the model first folds them,
// with the summary before, into a new summary: a model call of its own,
// recorded with the turn's first step (a crash before that step makes it
// again; it has no side effect). Every later request carries the summary
// after the system prompt.

// summaryPrompt is the system prompt of the call that summarises.
const summaryPrompt = "You summarise a conversation so that it can go on without its earlier turns. " +
	"Write a concise summary of the turns below, folding in the earlier summary if one is given: " +
	"keep facts, decisions, names, numbers, what tools returned, and open questions; leave out pleasantries. " +
	"Answer with the summary only."

// summaryHeading introduces the summary in the system prompt of the
// agent's requests.
const summaryHeading = "Summary of the earlier turns of this conversation (written by a model from them; their messages follow no more):"

// maxFoldedText clips each message's text in what the summarising call is
// sent.
const maxFoldedText = 4000

// compact keeps the earlier turns within the budget before cur's first
// model request.
func (a *agent) compact(ctx context.Context, rc runContext, cur *Turn) error {
	set := a.t.def.Conversation
	a.mu.Lock()
	n := a.rec.overBudget(set.MaxTokens)
	gone := a.rec.Messages[:n]
	prev := a.rec.Summary
	a.mu.Unlock()
	if n == 0 {
		return nil
	}
	if set.Trim != TrimSummarize {
		a.mu.Lock()
		a.rec.drop(n)
		a.mu.Unlock()
		return nil
	}
	a.push(ctx, rc, ProgressType, fmt.Sprintf("summarising %d earlier messages", n))
	resp, err := a.complete(ctx, rc, &Request{
		Model:           a.t.def.Model.Name,
		System:          summaryPrompt,
		Messages:        []Message{{Role: RoleUser, Text: transcript(prev, gone), Turn: cur.ID}},
		MaxOutputTokens: max(256, set.MaxTokens/4),
	})
	if err != nil {
		switch errs.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
			// Asking again would fail the same way: the turns go unsummarised.
			a.h.Logger().Warn("the model refused to summarise the earlier turns; they are dropped", "turn", cur.ID, "err", err)
			a.mu.Lock()
			a.rec.drop(n)
			a.mu.Unlock()
			return nil
		}
		return errs.Wrap(errs.Code(err), err, "%s: summarise the earlier turns", a.h.Address())
	}
	if err := a.charge(ctx, cur, 0, resp.Usage); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Summary{Text: strings.TrimSpace(resp.Text), Through: gone[len(gone)-1].Turn, At: a.t.opts.clk.Now(), Turn: cur.ID, Turns: foldedTurns(gone)}
	folded, outside, _ := lowest(gone, prev)
	s.Label, s.Outside = folded.Name(), outside
	if prev != nil {
		s.Turns += prev.Turns
		s.Usage = prev.Usage
		if s.Text == "" {
			s.Text = prev.Text
		}
	}
	s.Usage.add(resp.Usage)
	a.rec.Summary = &s
	a.rec.drop(n)
	cur.Usage.add(resp.Usage)
	a.rec.Usage.add(resp.Usage)
	return nil
}

// system is the system prompt of the agent's requests: the definition's,
// then the summary of the earlier turns if there is one (fenced, if what
// it folds is below user-input; fenced says so).
func (a *agent) system() (prompt string, fenced bool) {
	a.mu.Lock()
	s := a.rec.Summary
	a.mu.Unlock()
	if s == nil || s.Text == "" {
		return a.t.def.SystemPrompt, false
	}
	text := s.Text
	if l := summaryLabel(s); l.Lower(grain.LabelUserInput) != grain.LabelUserInput {
		text, fenced = fence(text, l, s.Outside, "summary"), true
	}
	if a.t.def.SystemPrompt == "" {
		return summaryHeading + "\n" + text, fenced
	}
	return a.t.def.SystemPrompt + "\n\n" + summaryHeading + "\n" + text, fenced
}

// foldedTurns counts the turns of msgs.
func foldedTurns(msgs []Message) int {
	n, last := 0, ""
	for i, m := range msgs {
		if i == 0 || m.Turn != last {
			n++
			last = m.Turn
		}
	}
	return n
}

// transcript writes the earlier summary and the messages to fold as text
// for the summarising call.
func transcript(prev *Summary, msgs []Message) string {
	var b strings.Builder
	if prev != nil && prev.Text != "" {
		b.WriteString("Earlier summary:\n")
		b.WriteString(prev.Text)
		b.WriteString("\n\n")
	}
	b.WriteString("Turns to fold in:\n")
	for _, m := range msgs {
		text := clipText(m.Text, maxFoldedText)
		if fenced(m) {
			text = fence(text, labelOf(m), m.Outside, m.Name)
		}
		switch m.Role {
		case RoleTool:
			fmt.Fprintf(&b, "tool result (%s): %s\n", m.Name, text)
		default:
			if m.Text != "" {
				fmt.Fprintf(&b, "%s: %s\n", m.Role, text)
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "%s called %s(%s)\n", m.Role, c.Name, clipText(c.Arguments, maxFoldedText))
			}
		}
	}
	return b.String()
}
