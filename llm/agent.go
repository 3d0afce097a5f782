package llm

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// Message types of a model agent.
const (
	// SkillConversation is the skill that returns the agent's recorded
	// conversation (a Conversation, as JSON).
	SkillConversation = "conversation"
	// SkillAsk is the text turn as a skill: a request of this type with
	// text is the same turn as one with no message type. It is there for
	// callers that name a skill, such as an MCP client, to whom the agent
	// is the tool "ask" taking {"message": text}.
	SkillAsk = "ask"
	// ProgressType is the type of the one-way messages a turn pushes to
	// its caller, when the caller is a client session, as it goes: each
	// model call and each tool call.
	ProgressType = "llm.progress"
	// ProgressDelta is the type of the pushed pieces of the model's text
	// while it streams (WithStreaming).
	ProgressDelta = "llm.delta"
	// AnswerType is the type of the one-way message that takes the answer
	// of a turn its reminder resumed to the turn's caller.
	AnswerType = "llm.answer"
	// ResumeReminder names the reminder that resumes a turn left
	// unfinished by a crash, and is the type of its ticks. An activation
	// registers it with the first step of a turn it records (beside that
	// step's save) and keeps it between turns; a tick that finds no turn
	// unfinished removes it, and so does the activation's end between
	// turns.
	ResumeReminder = "llm.resume"
	// ReplyToKey is the key, in the State of an event, a one-way message
	// or a published message, of the address its turn's answer goes to
	// (a one-way message of AnswerType). Without it the answer goes
	// nowhere (it stays in the record). Only an address of the agent's
	// owner or of the principal of the turn is answered.
	ReplyToKey = "reply_to"
)

// What starts a turn, as Turn.Trigger and TurnSummary.Trigger name it
// ("" for a request, whose caller waits for the answer).
const (
	// TriggerEvent: an event (Host.Event, a broadcast event).
	TriggerEvent = "event"
	// TriggerMessage: a one-way message (Host.Send, the SDK's Send).
	TriggerMessage = "message"
	// TriggerTopic: a message published to a topic the agent subscribes
	// to.
	TriggerTopic = "topic"
	// TriggerSchedule: a firing of a schedule entry.
	TriggerSchedule = "schedule"
	// TriggerBackground: the answer of an outside A2A agent that a tool
	// call of an earlier turn asked in the background.
	TriggerBackground = "background"
)

// Register registers def's agent type in reg: agents that answer each
// request (its text) with def's model, calling def's tools, within def's
// limits, recording every step in their durable state (see Conversation).
// The type's one typed skill is SkillConversation. def is validated first
// (InvalidArgument naming the field); a model whose API key variable is
// not set is FailedPrecondition. A definition with a daily token budget
// registers BudgetType too, if reg has none. Agent types named in def's tools are read
// from reg when an agent first needs its tools (else from the directory),
// so they may be registered after this.
func Register(reg *grain.Registry, def Definition, opts ...Option) error {
	f, info, err := Factory(reg, def, opts...)
	if err != nil {
		return err
	}
	if def.Limits.OwnerDailyTokens > 0 {
		if err := RegisterBudget(reg); err != nil {
			return err
		}
	}
	if def.Conversation.Shared {
		if err := RegisterSession(reg, opts...); err != nil {
			return err
		}
	}
	return reg.Register(def.Type, f, info)
}

// Factory returns def's agents' factory and TypeInfo, for a registry of
// one's own (Register uses it). reg is where agent tools' types are read.
func Factory(reg *grain.Registry, def Definition, opts ...Option) (grain.Factory, grain.TypeInfo, error) {
	if err := def.Validate(); err != nil {
		return nil, grain.TypeInfo{}, err
	}
	o := newOptions(opts)
	p := o.provider
	if p == nil {
		var err error
		if p, err = newProvider(def.Model, o); err != nil {
			return nil, grain.TypeInfo{}, err
		}
	}
	t := &agentType{def: def, provider: p, opts: o, reg: reg, tracer: newTracer(o.tracer).metered(o.metrics, def.Type)}
	desc := def.Description
	if desc == "" {
		desc = "A model agent (" + def.Model.Provider + " " + def.Model.Name + ")."
	}
	info := grain.TypeInfo{
		Description: desc,
		PerContext:  def.Conversation.Key != KeyAgent,
		Skills: []grain.Skill{
			{Name: SkillAsk, Description: "Ask the agent: a turn of its model loop with this text; the reply is its answer."},
			// The record is read while a turn runs, beside it (a.mu
			// guards it).
			grain.TypedSkill[struct{}, any](SkillConversation, "The agent's recorded conversation: its messages, tool calls and results, turns and token counts, as JSON.").Interleaving(),
			grain.TypedSkill[struct{}, []Approval](SkillApprovals, "The tool calls the agent's turn waits to have approved.").Interleaving(),
			grain.TypedSkill[Decision, Decided](SkillDecide, "Approve or deny a tool call that waits for approval (its owner, or a principal the ACL grants Approve on it)."),
			grain.TypedSkill[struct{}, Forgotten](SkillForget, "Delete the agent's recorded conversation, between turns (its owner, or a principal the ACL grants Configure on it)."),
		},
	}
	for i := range info.Skills {
		info.Skills[i].Scopes = slices.Clone(def.Scopes)
	}
	return func(h grain.Host) (grain.Agent, error) { return &agent{t: t, h: h}, nil }, info, nil
}

// agentType is what the activations of one definition share.
type agentType struct {
	def      Definition
	provider Provider
	opts     *options
	reg      *grain.Registry
	tracer   tracer
}

// agent is one model agent's activation. Its turns run one at a time, but
// while a turn waits for its tools a request of the same call chain may
// come in (a tool that asks back): mu guards what such a nested turn may
// read (the record) or test (busy).
type agent struct {
	t *agentType
	h grain.Host

	mu   sync.Mutex
	rec  Conversation
	etag string
	busy bool

	// stale says the record in memory may differ from the stored one (a
	// save failed): it is loaded again before the next turn. Touched by
	// the running turn only.
	stale bool
	// unsaved says the current turn, a request's, is not recorded yet: it
	// is, with its first model response (see begin). reminded says this
	// activation registered the resume reminder. Touched in turn only.
	unsaved, reminded bool
	tools             *toolSet
	// session holds the exchanges of the other agents of the session
	// the agent shares (conversation.shared), read for the turn
	// sessionTurn. Touched in turn only.
	session     []SessionEntry
	sessionTurn string
	// audited are the approvals (id) and decisions ("decided/" id) this
	// activation recorded in the audit (audit.go).
	audited map[string]bool
}

// OnActivate implements grain.Activator: it loads the record.
func (a *agent) OnActivate(ctx context.Context) error { return a.load(ctx) }

func (a *agent) load(ctx context.Context) error {
	data, etag, err := a.h.LoadState(stateContext{ctx})
	if err != nil {
		return err
	}
	var rec Conversation
	if len(data) > 0 {
		if err := json.Unmarshal(data, &rec); err != nil {
			return errs.Wrap(codes.Internal, err, "%s: the recorded conversation does not decode", a.h.Address())
		}
	}
	a.mu.Lock()
	a.rec, a.etag = rec, etag
	a.mu.Unlock()
	a.stale = false
	return nil
}

// OnDeactivate implements grain.Deactivator: an activation that ends
// between turns removes the resume reminder it registered and, if the
// definition sets a retention, registers the reminder that deletes the
// conversation once it passes.
func (a *agent) OnDeactivate(ctx context.Context, _ grain.Reason) {
	if a.reminded && a.rec.Current == nil && !a.stale {
		a.unregister(ctx)
	}
	a.keep(ctx)
}

// save stores the record if it is still the version last loaded or saved.
// A record with a turn in progress needs the resume reminder: if this
// activation has not registered it, it is registered beside the save (the
// two writes go to the stores together).
func (a *agent) save(ctx context.Context) error {
	a.mu.Lock()
	data, err := json.Marshal(&a.rec)
	etag := a.etag
	remind := a.rec.Current != nil && !a.reminded && a.t.opts.resumeDue >= 0
	a.mu.Unlock()
	if err != nil {
		a.stale = true
		return errs.Wrap(codes.Internal, err, "encode the conversation of %s", a.h.Address())
	}
	var registered chan error
	if remind {
		registered = make(chan error, 1)
		go func() {
			registered <- a.h.RegisterReminder(ctx, ResumeReminder, a.t.opts.resumeDue, a.t.opts.resumePeriod, ResumeReminder, "")
		}()
	}
	next, err := a.h.SaveState(stateContext{ctx}, data, etag)
	if remind {
		if rerr := <-registered; rerr != nil {
			a.h.Logger().Warn("no reminder to resume the turn after a crash; only a retry of its request will", "err", rerr)
		} else {
			a.reminded = true
		}
	}
	if err != nil {
		a.stale = true
		return err
	}
	a.mu.Lock()
	a.etag = next
	a.mu.Unlock()
	a.unsaved = false
	return nil
}

// keepUnfinished records the current turn, a request's that failed
// before its first step was recorded, so that its reminder resumes it as
// it would any turn left unfinished. It is saved on a context of its own:
// the caller may have gone.
func (a *agent) keepUnfinished(ctx context.Context) {
	if !a.unsaved || a.rec.Current == nil || a.stale {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if err := a.save(sctx); err != nil {
		a.h.Logger().Warn("the unfinished turn of a failed request is not recorded; only a retry of the request will run it", "turn", a.rec.Current.ID, "err", err)
	}
}

// stateContext is ctx without its values: the record's loads and saves
// are not made in the name of the request's idempotency key. The runtime
// would record the key with the turn's first save (a keyed save), so that
// a retry of the request, resuming the turn, could not save at all; the
// agent keeps its own record of the answers by key instead (Conversation's
// Answers). Deadline and cancellation are ctx's.
type stateContext struct{ context.Context }

func (stateContext) Value(any) any { return nil }

// OnMessage implements grain.Agent. A request is a turn whose caller
// waits for the answer; a one-way message with text, and a message
// published to a topic the agent subscribes to, start turns whose answer
// goes nowhere, or to the message's ReplyToKey.
func (a *agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	self := m.Kind == grain.KindOneWay && m.From == a.h.Address().String()
	switch {
	case m.MessageType == SkillAsk:
		// The text turn, named: as a request without a message type.
	case m.MessageType == SkillConversation:
		a.mu.Lock()
		defer a.mu.Unlock()
		return grain.JSONReply(m, &a.rec)
	case m.MessageType == SkillApprovals:
		a.mu.Lock()
		defer a.mu.Unlock()
		var waiting []Approval
		if a.rec.Current != nil {
			waiting = a.rec.Current.waiting()
		}
		return grain.JSONReply(m, waiting)
	case m.MessageType == "" && m.Kind == grain.KindRequest && m.State[StateApproval] != "":
		return a.answer(ctx, m, m.State[StateApproval])
	case m.MessageType == SkillDecide && m.Kind == grain.KindRequest:
		return a.decide(ctx, m)
	case m.MessageType == SkillForget && m.Kind == grain.KindRequest:
		return a.forget(ctx, m)
	case self && m.MessageType == RetentionReminder:
		a.expire(ctx)
		return nil, nil
	case m.MessageType == a2aResult && m.Kind != grain.KindRequest:
		// An outside agent's answer to a call the model made in the
		// background: a turn of its own, as a synthetic user message.
		if !a.enter() {
			return nil, errs.New(codes.FailedPrecondition, "%s is in a turn already: a tool of its turn asked it back", a.h.Address())
		}
		defer a.leave()
		a.untended(ctx, backgroundMessage(m), TriggerBackground)
		return nil, nil
	case self && m.MessageType == ResumeReminder:
		a.tick(ctx)
		return nil, nil
	case self && m.MessageType == ScheduleType:
		a.scheduled(ctx, m)
		return nil, nil
	case m.MessageType != "" && m.Kind != grain.KindRequest:
		// Not text: an answer of another agent's resumed turn, a push.
		a.h.Logger().Debug("a one-way message that is not text starts no turn", "message_type", clipText(m.MessageType, 64), "from", m.From)
		return nil, nil
	case m.MessageType != "":
		err := errs.New(codes.InvalidArgument, "%s: no skill %q (ask with text, or %q, or %q)", a.h.Address(), clipText(m.MessageType, 64), SkillAsk, SkillConversation)
		if m.Topic != "" {
			return nil, grain.Poison(err.Error()) // delivering it again would fail the same way
		}
		return nil, err
	}
	if !a.enter() {
		return nil, errs.New(codes.FailedPrecondition, "%s is in a turn already: a tool of its turn asked it back", a.h.Address())
	}
	defer a.leave()
	switch {
	case m.Kind != grain.KindRequest:
		a.untended(ctx, m, TriggerMessage)
		return nil, nil
	case m.Topic != "":
		return nil, a.published(ctx, m)
	}
	ans, err := a.ask(ctx, m)
	if err != nil {
		return nil, err
	}
	if len(ans.pending) > 0 {
		return a.approvalReply(m, ans.pending)
	}
	return reply(m, ans)
}

// OnEvent implements grain.EventHandler: an event with text starts a turn
// as a one-way message does.
func (a *agent) OnEvent(ctx context.Context, m *grain.Message) error {
	if m.MessageType != "" {
		return nil
	}
	if !a.enter() {
		return errs.New(codes.FailedPrecondition, "%s is in a turn already: a tool of its turn asked it back", a.h.Address())
	}
	defer a.leave()
	a.untended(ctx, m, TriggerEvent)
	return nil
}

func (a *agent) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy {
		return false
	}
	a.busy = true
	return true
}

func (a *agent) leave() {
	a.mu.Lock()
	a.busy = false
	a.mu.Unlock()
}

// reply is the reply to m of a turn that ended with ans.
func reply(m *grain.Message, ans Answer) (*grain.Message, error) {
	if ans.err != nil {
		return nil, ans.err
	}
	if ans.Code != codes.OK {
		return nil, errs.New(ans.Code, "%s", ans.Error)
	}
	r := m.Response()
	r.Message = ans.Text
	r.Label, r.Outside = ans.label, ans.outside
	return r, nil
}

// messageText is the text of a message: its text, else its data.
func messageText(m *grain.Message) string {
	if m.Message == "" && len(m.Data) > 0 {
		return string(m.Data)
	}
	return m.Message
}

// ask answers the request m: with the recorded answer of its idempotency
// key, by resuming its turn, or with a new turn (after finishing any turn
// left unfinished).
func (a *agent) ask(ctx context.Context, m *grain.Message) (Answer, error) {
	text := messageText(m)
	if strings.TrimSpace(text) == "" {
		return Answer{}, errs.New(codes.InvalidArgument, "%s: the request has no text", a.h.Address())
	}
	s := turnStart{text: text, key: m.IdempotencyKey, from: m.From, principal: principalOf(m), context: m.State[grain.StateContext], label: m.Label, outside: m.Outside}
	if ans, ok, err := a.known(ctx, s); ok || err != nil {
		return ans, err
	}
	cur := a.rec.Current
	if cur == nil || cur.Key == "" || cur.Key != s.key || cur.Principal != s.principal {
		var err error
		if cur, err = a.begin(ctx, s); err != nil {
			return Answer{}, err
		}
	}
	ans, err := a.run(ctx, a.liveRun(cur))
	if err != nil {
		a.keepUnfinished(ctx)
	}
	return ans, err
}

// turnStart is what a new turn starts from.
type turnStart struct {
	text string
	// key is the idempotency key its answer is recorded under ("": none).
	key string
	// from sent the message; principal is the one it is on behalf of.
	from, principal string
	// trigger is what started it ("" for a request); replyTo is where the
	// answer of a turn without a waiting caller goes ("" for nowhere).
	trigger, replyTo string
	// schedule and at are the schedule reminder and the firing a
	// scheduled turn is for.
	schedule string
	at       time.Time
	// context is the conversation context the request was routed by, to
	// this agent as that context's (grain.StateContext).
	context string
	// label and outside are the content label of the message (unset:
	// user-input, as a schedule entry's message).
	label   grain.Label
	outside bool
}

// known returns the recorded answer of s's key, if any (loading the
// record first if it may be stale).
func (a *agent) known(ctx context.Context, s turnStart) (Answer, bool, error) {
	if a.stale {
		if err := a.load(ctx); err != nil {
			return Answer{}, false, err
		}
	}
	ans, ok := a.rec.answer(s.key, s.principal)
	return ans, ok, nil
}

// begin starts a new turn from s, after finishing any turn left
// unfinished, and returns it: its message appended, Current set. A turn
// without a waiting caller (s.trigger set) is recorded at once, and the
// resume reminder registered beside it. A request's turn is recorded with
// its first model response (one write less in every turn): until then,
// nothing has happened that a retry of the request would repeat, and a
// request that fails before it is recorded then (keepUnfinished). A
// budget spent is ResourceExhausted, with nothing recorded.
func (a *agent) begin(ctx context.Context, s turnStart) (*Turn, error) {
	if cur := a.rec.Current; cur != nil {
		// A turn left unfinished by a crash comes first: the conversation
		// goes on from its end. If another principal started it, it may
		// not use this one's rights on other owners' agents.
		ans, err := a.run(ctx, runContext{ownOnly: cur.Principal != s.principal})
		if err != nil {
			return nil, errs.Wrap(errs.Code(err), err, "%s: the turn %s, left unfinished, must end before a new one starts, and could not", a.h.Address(), cur.ID)
		}
		if len(ans.pending) > 0 {
			return nil, errs.New(codes.FailedPrecondition, "%s: the turn %s waits for approvals (%s); a new turn starts once they are decided; this one did not run", a.h.Address(), cur.ID, describe(ans.pending))
		}
		a.deliver(ctx, cur, ans)
	}
	if err := a.checkBudget(ctx); err != nil {
		return nil, err
	}
	now := a.t.opts.clk.Now()
	cur := &Turn{
		ID:        grain.NewID(),
		Key:       s.key,
		From:      s.from,
		Principal: s.principal,
		Trigger:   s.trigger,
		ReplyTo:   s.replyTo,
		Started:   now,
		Deadline:  now.Add(a.t.def.Limits.timeout()),
	}
	a.mu.Lock()
	cur.Start = len(a.rec.Messages)
	a.rec.Messages = append(a.rec.Messages, Message{Role: RoleUser, Text: s.text, Turn: cur.ID, Label: s.label.Name(), Outside: s.outside})
	a.rec.Current = cur
	if s.schedule != "" {
		a.rec.fired(s.schedule, s.at)
	}
	if a.rec.Context == "" && s.context != "" && grain.BaseAddress(a.h.Address()) != a.h.Address() {
		a.rec.Context = clipText(s.context, maxContext)
	}
	a.mu.Unlock()
	if s.trigger == "" {
		a.unsaved = true
		return cur, nil
	}
	if err := a.save(ctx); err != nil {
		return nil, err
	}
	afterStep(ctx, stepStarted)
	return cur, nil
}

// untended runs a turn for m, an event or a one-way message: nobody waits
// for its answer, which goes to m's ReplyToKey if it names one. A failure
// is logged: a turn that started and did not end is resumed by its
// reminder.
func (a *agent) untended(ctx context.Context, m *grain.Message, trigger string) {
	text := messageText(m)
	if strings.TrimSpace(text) == "" {
		a.h.Logger().Debug("a message without text starts no turn", "from", m.From, "kind", m.Kind)
		return
	}
	s := turnStart{text: text, key: m.IdempotencyKey, from: m.From, principal: principalOf(m), trigger: trigger, label: m.Label, outside: m.Outside}
	s.replyTo = a.replyTo(m, s.principal)
	ans, ok, err := a.known(ctx, s)
	if err == nil && !ok {
		ans, err = a.runUntended(ctx, s)
	}
	if err != nil {
		a.h.Logger().Warn("the turn of a message without a caller failed", "trigger", trigger, "from", m.From, "err", err)
		if errs.Code(err) == codes.ResourceExhausted && s.replyTo != "" {
			a.send(ctx, s.replyTo, Answer{Key: s.key, Code: codes.ResourceExhausted, Error: err.Error()})
		}
		return
	}
	if s.replyTo != "" && !ok && len(ans.pending) == 0 {
		a.send(ctx, s.replyTo, ans)
	}
}

// runUntended runs s's turn (resuming it if it is the current one, by its
// key) with nobody to push progress to.
func (a *agent) runUntended(ctx context.Context, s turnStart) (Answer, error) {
	if cur := a.rec.Current; cur == nil || cur.Key == "" || cur.Key != s.key || cur.Principal != s.principal {
		if _, err := a.begin(ctx, s); err != nil {
			return Answer{}, err
		}
	}
	return a.run(ctx, runContext{})
}

// published takes a message published to a topic the agent subscribes
// to: its turn is recorded (keyed by the subscription and the message, so
// that a delivery again finds it) and the delivery acknowledged at once;
// the turn then runs as the agent's next message, and after a crash by
// its resume reminder. The answer goes to the message's ReplyToKey, if
// any. A budget spent is the delivery's error (ResourceExhausted): it is
// delivered again later, and ends a dead letter.
func (a *agent) published(ctx context.Context, m *grain.Message) error {
	text := messageText(m)
	if strings.TrimSpace(text) == "" {
		return grain.Poison("the message has no text")
	}
	s := turnStart{text: text, key: "topic/" + m.Subscription + "/" + m.ID, from: m.From, principal: principalOf(m), trigger: TriggerTopic, label: m.Label, outside: m.Outside}
	s.replyTo = a.replyTo(m, s.principal)
	if _, ok, err := a.known(ctx, s); ok || err != nil {
		return err
	}
	cur := a.rec.Current
	if cur == nil || cur.Key != s.key {
		var err error
		if cur, err = a.begin(ctx, s); err != nil {
			return err
		}
	}
	// The turn runs next, in a turn of its own (the delivery is
	// acknowledged now): the agent's message to itself that resumes it.
	if err := a.h.Send(ctx, a.h.Address().String(), &grain.Message{MessageType: ResumeReminder, Message: cur.ID}); err != nil {
		a.h.Logger().Warn("the turn of a published message waits for its resume reminder", "turn", cur.ID, "err", err)
	}
	return nil
}

// replyTo is where the answer of m's turn goes: m's ReplyToKey if it is
// an address of the agent's owner or of principal, else nowhere (the
// answer must not reach, in the agent's name, what the principal may not
// message).
func (a *agent) replyTo(m *grain.Message, principal string) string {
	to := m.State[ReplyToKey]
	if to == "" {
		return ""
	}
	addr, err := grain.Resolve(to, a.h.Owner())
	if err != nil || (addr.Owner != a.h.Owner() && addr.Owner != principal) {
		a.h.Logger().Warn("the message's reply_to is not an address of the agent's owner or of its principal: the answer goes nowhere", "reply_to", clipText(to, 200), "principal", principal)
		return ""
	}
	return addr.String()
}

// principalOf is the principal m is on behalf of: the one the runtime
// stamped, else its sender's owner.
func principalOf(m *grain.Message) string {
	if m.OnBehalfOf != "" {
		return m.OnBehalfOf
	}
	if a, err := grain.Resolve(m.From, ""); err == nil {
		return a.Owner
	}
	return ""
}

// tick handles the resume reminder: it resumes a turn left unfinished (on
// behalf of the agent's owner, so without the rights of the principal who
// started it on other owners' agents), and sends its answer to its
// caller; with no such turn (or one only in memory, a request's whose
// caller is still there to retry it), it removes the reminder.
func (a *agent) tick(ctx context.Context) {
	if a.stale {
		if err := a.load(ctx); err != nil {
			a.h.Logger().Warn("resume: load the conversation", "err", err)
			return
		}
	}
	cur := a.rec.Current
	if cur == nil || a.unsaved {
		a.unregister(ctx)
		return
	}
	if !a.enter() {
		return
	}
	defer a.leave()
	rc := runContext{ownOnly: cur.Principal != "" && cur.Principal != a.h.Owner()}
	ans, err := a.run(ctx, rc)
	if err != nil {
		a.h.Logger().Warn("resume: the turn did not end; the reminder will try again", "turn", cur.ID, "err", err)
		return
	}
	if len(ans.pending) > 0 {
		return // it waits for approvals; the reminder is set to their deadline
	}
	a.deliver(ctx, cur, ans)
}

// deliver sends the answer of cur, a turn whose caller was not waiting
// for it when it ended, to the caller (a request's), or to its reply-to
// address (a turn without a caller's).
func (a *agent) deliver(ctx context.Context, cur *Turn, ans Answer) {
	to := cur.From
	if cur.Trigger != "" {
		to = cur.ReplyTo
	}
	if to == "" {
		return
	}
	a.send(ctx, to, ans)
}

// send sends ans to `to`: a one-way message of AnswerType, naming the
// turn and the idempotency key of its request in its state.
func (a *agent) send(ctx context.Context, to string, ans Answer) {
	msg := &grain.Message{MessageType: AnswerType, Message: ans.Text, State: map[string]string{"turn": ans.Turn, "key": ans.Key}, Label: ans.label, Outside: ans.outside}
	if ans.Code != codes.OK {
		msg.State["code"] = ans.Code.String()
		msg.State["error"] = ans.Error
	}
	if err := a.h.Send(ctx, to, msg); err != nil {
		a.h.Logger().Debug("the answer of a turn did not reach its addressee", "turn", ans.Turn, "to", to, "err", err)
	}
}

func (a *agent) unregister(ctx context.Context) {
	if a.t.opts.resumeDue < 0 {
		return
	}
	if err := a.h.UnregisterReminder(ctx, ResumeReminder); err != nil && errs.Code(err) != codes.NotFound {
		a.h.Logger().Debug("remove the resume reminder", "err", err)
		return
	}
	a.reminded = false
}

// timeLeft is how long the turn may still run.
func (a *agent) timeLeft(cur *Turn) time.Duration {
	return cur.Deadline.Sub(a.t.opts.clk.Now())
}
