package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Approvals. A tool call whose tool needs approval (the definition's
// approval list, or a skill whose TypeInfo says so) waits for a person's
// decision: the loop records the call as an Approval of the turn, saves,
// and lets the activation go. The parked turn holds no goroutine and, once
// the activation ends, no memory; the resume reminder is set to fire at
// the approval's deadline. A decision (SkillDecide) is recorded, and the
// turn goes on as the agent's next message: the approved call runs (with
// the arguments the decider gave, if any), a denied one gets the denial as
// its result. The turn's timeout does not run while it waits.

// Message types and skills of approvals.
const (
	// SkillDecide decides an approval: a typed skill taking a Decision and
	// returning a Decided. Only the agent's owner, or a principal the
	// silo's ACL grants Approve on the agent, may decide.
	SkillDecide = "decide"
	// SkillApprovals lists the approvals the agent's turn waits for (a
	// typed skill returning []Approval; it runs beside a turn).
	SkillApprovals = "approvals"
	// InputRequired is the type of the reply to a request whose turn waits
	// for approvals (the type the A2A server makes an input-required task
	// of): its data is an ApprovalRequest (JSON), its text says what
	// waits, and its state has "status" "input-required" and, under
	// StateApproval, the ids of what waits. It is grain.Provisional: a
	// retry of the request with its idempotency key reaches the agent
	// again (and gets this reply, or the answer once the turn has ended).
	// The turn's answer goes to the caller as a one-way message of
	// AnswerType, unless the caller answers the reply itself (see
	// StateApproval).
	InputRequired = "input-required"
	// StateApproval is the key, in the state of an InputRequired reply,
	// of the ids of the approvals that wait (comma-separated). A request
	// whose state carries it back (as an A2A client's next message on an
	// input-required task does) answers them: its data a Decision as JSON
	// (its id may be left out), or its text "approve" (or "yes") or "deny"
	// (or "no"), followed by a reason if it likes. Who may decide is as
	// for SkillDecide; the turn then goes on in this
	// request, whose reply is the turn's answer (or another InputRequired).
	StateApproval = "llm.approval"
	// ApprovalType is the type of the messages published to the approvals
	// topic: an ApprovalRequest (JSON) of one new approval.
	ApprovalType = "llm.approval"
	// ApprovalTopic starts the name of the topic, of the agent's owner,
	// that each new approval is published to: approvals.<owner>.<type>.
	ApprovalTopic = "approvals"
)

// The decisions an Approval records.
const (
	Approved = "approved"
	Denied   = "denied"
)

// Approval is a tool call that waits, or waited, for a person's decision.
type Approval struct {
	// ID names it: <agent address>/<uuid>.
	ID   string `json:"id"`
	Turn string `json:"turn"`
	// Call is the tool call; once approved with other arguments, Call has
	// them and Original the model's.
	Call      ToolCall  `json:"call"`
	Original  string    `json:"original_arguments,omitempty"`
	Requested time.Time `json:"requested"`
	Deadline  time.Time `json:"deadline"`
	// Why, if set, says why the call waits other than that its tool
	// needs approval: it is sensitive and the model has read untrusted
	// content (see docs/trust.md).
	Why string `json:"why,omitempty"`
	// Decision is "" while it waits, else Approved or Denied; By is the
	// principal who decided ("" when the deadline did), At when, Reason
	// why (a denial's reason as the model gets it).
	Decision string    `json:"decision,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

// Decision is SkillDecide's input.
type Decision struct {
	// ID is the approval's.
	ID string `json:"id"`
	// Approve approves the call; false denies it.
	Approve bool `json:"approve"`
	// Arguments, if set, replace the call's (checked against the tool's
	// schema).
	Arguments map[string]any `json:"arguments,omitempty"`
	// Reason is given to the model with a denial, and recorded.
	Reason string `json:"reason,omitempty"`
}

// Decided is SkillDecide's output.
type Decided struct {
	ID       string `json:"id"`
	Turn     string `json:"turn"`
	Decision string `json:"decision"`
}

// ApprovalRequest is the data of an ApprovalType reply and of what is
// published to the approvals topic.
type ApprovalRequest struct {
	Agent     string     `json:"agent"`
	Approvals []Approval `json:"approvals"`
}

// maxDecisions bounds Conversation.Decisions.
const maxDecisions = 256

// maxReason bounds a decision's reason.
const maxReason = 2000

// approvalID returns the approval id of a new approval of the agent at
// addr.
func approvalID(addr string) string { return addr + "/" + grain.NewID() }

// waiting returns the turn's approvals still waiting.
func (t *Turn) waiting() []Approval {
	var out []Approval
	for _, ap := range t.Approvals {
		if ap.Decision == "" {
			out = append(out, ap)
		}
	}
	return out
}

// approvalOf returns the turn's approval of the call id.
func (t *Turn) approvalOf(callID string) *Approval {
	for i := range t.Approvals {
		if t.Approvals[i].Call.ID == callID {
			return &t.Approvals[i]
		}
	}
	return nil
}

// gate sorts calls, the calls of the turn's last response without a
// result: those free to run now (needing no approval, or approved) it
// returns; a denied one gets its result recorded; one that needs approval
// and has none gets one, waiting. An approval past its deadline is decided
// by it. waiting says some still wait. The record is saved if it changed.
func (a *agent) gate(ctx context.Context, cur *Turn, calls []ToolCall) (run []ToolCall, waiting bool, err error) {
	now := a.t.opts.clk.Now()
	var fresh []Approval
	var refused []refusal
	changed := false
	a.mu.Lock()
	// The calls of a sensitive tool wait too, or are refused, once the
	// model has read untrusted content, however it asks (see trust.go).
	_, _, untrusted := lowest(a.rec.Messages, a.rec.Summary)
	for _, c := range calls {
		t := a.tools.byName[c.Name]
		why := ""
		if t != nil && t.sensitive && untrusted != "" {
			why = fmt.Sprintf("%s is sensitive, and the model has read untrusted content: %s", c.Name, untrusted)
		}
		if t == nil || (!t.needsApproval(c.Arguments) && why == "") {
			run = append(run, c)
			continue
		}
		ap := cur.approvalOf(c.ID)
		if ap == nil && why != "" && a.t.def.OnUntrusted == OnUntrustedRefuse {
			a.rec.Messages = append(a.rec.Messages, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Text: "not run: " + why + "; the agent's definition refuses such calls (on_untrusted: refuse)", IsError: true, Turn: cur.ID, Label: systemLabel})
			refused = append(refused, refusal{c, why})
			changed = true
			continue
		}
		if ap == nil {
			cur.Approvals = append(cur.Approvals, Approval{
				ID:        approvalID(a.h.Address().String()),
				Turn:      cur.ID,
				Call:      c,
				Requested: now,
				Deadline:  now.Add(a.t.def.Limits.approvalTimeout()),
				Why:       why,
			})
			fresh = append(fresh, cur.Approvals[len(cur.Approvals)-1])
			changed, waiting = true, true
			continue
		}
		if ap.Decision == "" && !now.Before(ap.Deadline) {
			ap.Decision, ap.At, ap.Reason = Denied, now, "no decision before the approval's deadline"
			if a.t.def.Limits.ApproveOnTimeout {
				ap.Decision, ap.Reason = Approved, "approved by the definition when the approval's deadline passed"
			}
			changed = true
		}
		switch ap.Decision {
		case Approved:
			run = append(run, ap.Call)
		case Denied:
			text := "not run: a person's approval was needed and the call was denied " + byWhom(*ap)
			if ap.Reason != "" {
				text += ": " + ap.Reason
			}
			a.rec.Messages = append(a.rec.Messages, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Text: text, IsError: true, Turn: cur.ID, Label: systemLabel})
			changed = true
		default:
			waiting = true
		}
	}
	a.mu.Unlock()
	// A refused call is recorded before its refusal is saved (as a call
	// that ran is before its result): if the record fails, the turn
	// resumes later and refuses it again, under the same key.
	for _, r := range refused {
		if err := a.auditRefused(ctx, cur, r); err != nil {
			a.stale = true // the refusal in memory is not saved: load again
			return nil, false, err
		}
	}
	if changed {
		if err := a.save(ctx); err != nil {
			return nil, false, err
		}
	}
	a.auditApprovals(ctx, cur)
	for _, ap := range fresh {
		a.announce(ctx, ap)
	}
	return run, waiting, nil
}

// announce publishes a new approval to the approvals topic of the agent's
// owner and type; failures are not the turn's (the approval stays
// recorded, and listed by SkillApprovals).
func (a *agent) announce(ctx context.Context, ap Approval) {
	data, err := json.Marshal(ApprovalRequest{Agent: a.h.Address().String(), Approvals: []Approval{ap}})
	if err != nil {
		return
	}
	topic := ApprovalTopic + "." + a.h.Owner() + "." + a.h.Address().Type
	msg := &grain.Message{MessageType: ApprovalType, DataType: grain.JSONType, Data: data, Message: describe([]Approval{ap})}
	if _, err := a.h.Publish(ctx, topic, msg); err != nil {
		a.h.Logger().Debug("publish an approval", "topic", topic, "id", ap.ID, "err", err)
	}
}

// park ends this attempt at the turn, which waits for approvals: the turn's
// clock stops (ParkedAt) and the resume reminder is set to the first
// deadline. Its answer says what waits.
func (a *agent) park(ctx context.Context, cur *Turn) (Answer, error) {
	now := a.t.opts.clk.Now()
	waiting := cur.waiting()
	if cur.ParkedAt.IsZero() {
		a.mu.Lock()
		cur.ParkedAt = now
		a.mu.Unlock()
		if err := a.save(ctx); err != nil {
			return Answer{}, err
		}
	}
	first := waiting[0].Deadline
	for _, ap := range waiting[1:] {
		if ap.Deadline.Before(first) {
			first = ap.Deadline
		}
	}
	if a.t.opts.resumeDue >= 0 {
		if err := a.h.RegisterReminder(ctx, ResumeReminder, max(first.Sub(now), time.Second), a.t.opts.resumePeriod, ResumeReminder, ""); err != nil {
			a.h.Logger().Warn("no reminder for the deadline of a waiting approval; it is decided when the agent next runs", "err", err)
		} else {
			a.reminded = true
		}
	}
	return Answer{Turn: cur.ID, Key: cur.Key, pending: waiting}, nil
}

// unpark is called as a turn runs: a parked turn whose approvals are all
// decided, or have a deadline passed, goes on, its timeout moved by the
// time it waited. It reports whether the turn still waits.
func (a *agent) unpark(cur *Turn) bool {
	if cur.ParkedAt.IsZero() {
		return false
	}
	now := a.t.opts.clk.Now()
	for _, ap := range cur.waiting() {
		if now.Before(ap.Deadline) {
			return true
		}
	}
	a.mu.Lock()
	cur.Deadline = cur.Deadline.Add(now.Sub(cur.ParkedAt))
	cur.ParkedAt = time.Time{}
	a.mu.Unlock()
	return false
}

// describe says in words what waits.
func describe(aps []Approval) string {
	var b strings.Builder
	for i, ap := range aps {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s(%s) waits for approval, id %s, until %s", ap.Call.Name, clipText(ap.Call.Arguments, 300), ap.ID, ap.Deadline.UTC().Format(time.RFC3339))
		if ap.Why != "" {
			fmt.Fprintf(&b, " (%s)", ap.Why)
		}
	}
	return b.String()
}

// approvalReply is the reply to m, a request whose turn waits for aps.
func (a *agent) approvalReply(m *grain.Message, aps []Approval) (*grain.Message, error) {
	r, err := grain.JSONReply(m, ApprovalRequest{Agent: a.h.Address().String(), Approvals: aps})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(aps))
	for i, ap := range aps {
		ids[i] = ap.ID
	}
	r.MessageType = InputRequired
	r.Message = describe(aps)
	r.State = map[string]string{"status": "input-required", StateApproval: strings.Join(ids, ",")}
	return grain.Provisional(r), nil
}

// decide handles SkillDecide: it records the decision and lets the turn
// go on as the agent's next message.
func (a *agent) decide(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	var d Decision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "%s: %s: the decision is not JSON; nothing was decided", a.h.Address(), SkillDecide)
	}
	if !a.enter() {
		// Only while a tool of the turn asked back: decide between turns.
		return nil, errs.New(codes.FailedPrecondition, "%s is in a turn: approvals are decided between turns; nothing was decided", a.h.Address())
	}
	defer a.leave()
	out, cur, err := a.decision(ctx, principalOf(m), d)
	if err != nil {
		return nil, err
	}
	// The turn goes on as the agent's next message (its reminder, should
	// this one be lost).
	if len(cur.waiting()) == 0 {
		if err := a.h.Send(ctx, a.h.Address().String(), &grain.Message{MessageType: ResumeReminder}); err != nil {
			a.h.Logger().Warn("a decided turn waits for its resume reminder", "turn", cur.ID, "err", err)
		}
	}
	return grain.JSONReply(m, out)
}

// answer handles m, a request answering the approvals ids (the state of
// an InputRequired reply, carried back): it records the decision for each
// that still waits, and runs the turn on in m's turn.
func (a *agent) answer(ctx context.Context, m *grain.Message, ids string) (*grain.Message, error) {
	d, err := parseAnswer(m)
	if err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "%s: the answer to an approval is neither a decision (JSON) nor approve or deny; nothing was decided", a.h.Address())
	}
	targets := strings.Split(ids, ",")
	if d.ID != "" {
		targets = []string{d.ID}
	}
	if !a.enter() {
		return nil, errs.New(codes.FailedPrecondition, "%s is in a turn: approvals are decided between turns; nothing was decided", a.h.Address())
	}
	defer a.leave()
	principal := principalOf(m)
	var first error
	decided := 0
	for _, id := range targets {
		d.ID = id
		if _, _, err := a.decision(ctx, principal, d); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		decided++
	}
	if decided == 0 {
		return nil, first
	}
	cur := a.rec.Current // a decision was recorded: the turn is there
	rc := runContext{ownOnly: cur.Principal != principal}
	if takesPushes(m.From) {
		rc.pushTo = m.From
	}
	ans, err := a.run(ctx, rc)
	if err != nil {
		a.keepUnfinished(ctx)
		return nil, err
	}
	if len(ans.pending) > 0 {
		return a.approvalReply(m, ans.pending)
	}
	return reply(m, ans)
}

// parseAnswer reads a decision from m: a Decision as JSON data, or text
// that starts with approve/yes or deny/no (the rest, a reason).
func parseAnswer(m *grain.Message) (Decision, error) {
	var d Decision
	if len(m.Data) > 0 && json.Valid(m.Data) {
		dec := json.NewDecoder(strings.NewReader(string(m.Data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return d, fmt.Errorf("the data is not a decision: %w", err)
		}
		return d, nil
	}
	text := strings.TrimSpace(m.Message)
	word, rest, _ := strings.Cut(text, " ")
	word = strings.ToLower(strings.TrimRight(word, ".,:;!"))
	rest = strings.TrimSpace(strings.TrimLeft(rest, ".,:;!- "))
	switch word {
	case "approve", "approved", "yes", "y", "ok":
		d.Approve = true
	case "deny", "denied", "no", "n":
		d.Reason = clipText(rest, maxReason)
	default:
		return d, fmt.Errorf("the text %q starts with neither approve nor deny", clipText(text, 40))
	}
	return d, nil
}

// decision records d, decided by principal, and returns what was decided
// and the turn.
func (a *agent) decision(ctx context.Context, principal string, d Decision) (Decided, *Turn, error) {
	if err := a.h.Authorize(ctx, principal, "Approve"); err != nil {
		return Decided{}, nil, errs.Wrap(codes.PermissionDenied, err, "%s: only its owner, or a principal the ACL grants Approve on it, decides its approvals, not %s; nothing was decided", a.h.Address(), clipText(principal, 128))
	}
	if len(d.Reason) > maxReason {
		return Decided{}, nil, errs.New(codes.InvalidArgument, "%s: the reason has %d bytes, over %d; nothing was decided", a.h.Address(), len(d.Reason), maxReason)
	}
	if a.stale {
		if err := a.load(ctx); err != nil {
			return Decided{}, nil, err
		}
	}
	cur := a.rec.Current
	var ap *Approval
	if cur != nil {
		for i := range cur.Approvals {
			if cur.Approvals[i].ID == d.ID {
				ap = &cur.Approvals[i]
			}
		}
	}
	if ap == nil {
		if i := slices.IndexFunc(a.rec.Decisions, func(x Approval) bool { return x.ID == d.ID }); i >= 0 {
			x := a.rec.Decisions[i]
			return Decided{}, nil, errs.New(codes.FailedPrecondition, "%s: approval %s was decided already (%s %s at %s) and its turn has ended; nothing changed", a.h.Address(), clipText(d.ID, 200), x.Decision, byWhom(x), x.At.UTC().Format(time.RFC3339))
		}
		return Decided{}, nil, errs.New(codes.NotFound, "%s: no approval %s waits here; nothing was decided", a.h.Address(), clipText(d.ID, 200))
	}
	if ap.Decision != "" {
		return Decided{}, nil, errs.New(codes.FailedPrecondition, "%s: approval %s was decided already (%s %s at %s); nothing changed", a.h.Address(), ap.ID, ap.Decision, byWhom(*ap), ap.At.UTC().Format(time.RFC3339))
	}
	args := ""
	if d.Approve && d.Arguments != nil {
		b, err := json.Marshal(d.Arguments)
		if err != nil {
			return Decided{}, nil, errs.Wrap(codes.InvalidArgument, err, "%s: the arguments do not encode; nothing was decided", a.h.Address())
		}
		if a.tools == nil {
			tools, err := buildTools(ctx, a.h, a.t.reg, &a.t.def)
			if err != nil {
				return Decided{}, nil, err
			}
			a.tools = tools
		}
		t := a.tools.byName[ap.Call.Name]
		if t == nil {
			return Decided{}, nil, errs.New(codes.FailedPrecondition, "%s: the tool %s of approval %s is no longer the agent's; nothing was decided", a.h.Address(), ap.Call.Name, ap.ID)
		}
		if err := validate(t.input, b); err != nil {
			return Decided{}, nil, errs.Wrap(codes.InvalidArgument, err, "%s: the arguments do not match the schema of %s; nothing was decided", a.h.Address(), ap.Call.Name)
		}
		args = string(b)
	}
	a.mu.Lock()
	ap.Decision, ap.By, ap.At, ap.Reason = Denied, principal, a.t.opts.clk.Now(), d.Reason
	if d.Approve {
		ap.Decision = Approved
		if args != "" && args != ap.Call.Arguments {
			ap.Original, ap.Call.Arguments = ap.Call.Arguments, args
		}
	}
	out := Decided{ID: ap.ID, Turn: ap.Turn, Decision: ap.Decision}
	a.mu.Unlock()
	if err := a.save(ctx); err != nil {
		return Decided{}, nil, err
	}
	a.auditApprovals(ctx, cur)
	return out, cur, nil
}

func byWhom(ap Approval) string {
	if ap.By == "" {
		return "when its deadline passed"
	}
	return "by " + ap.By
}

// keepDecisions moves the ended turn's approvals to the conversation's
// decisions (call it as the turn ends, a.mu held).
func (c *Conversation) keepDecisions(cur *Turn) {
	if len(cur.Approvals) == 0 {
		return
	}
	c.Decisions = append(c.Decisions, cur.Approvals...)
	if len(c.Decisions) > maxDecisions {
		c.Decisions = slices.Clone(c.Decisions[len(c.Decisions)-maxDecisions:])
	}
}
