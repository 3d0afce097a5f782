package llm

import (
	"context"
	"encoding/json"
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
	// ResumeReminder names the reminder a turn registers at its start and
	// removes at its end, and is the type of its ticks.
	ResumeReminder = "llm.resume"
)

// Register registers def's agent type in reg: agents that answer each
// request (its text) with def's model, calling def's tools, within def's
// limits, recording every step in their durable state (see Conversation).
// The type's one typed skill is SkillConversation. def is validated first
// (InvalidArgument naming the field); a model whose API key variable is
// not set is FailedPrecondition. Agent types named in def's tools are read
// from reg when an agent first needs its tools (else from the directory),
// so they may be registered after this.
func Register(reg *grain.Registry, def Definition, opts ...Option) error {
	f, info, err := Factory(reg, def, opts...)
	if err != nil {
		return err
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
	t := &agentType{def: def, provider: p, opts: o, reg: reg, tracer: newTracer(o.tracer)}
	desc := def.Description
	if desc == "" {
		desc = "A model agent (" + def.Model.Provider + " " + def.Model.Name + ")."
	}
	info := grain.TypeInfo{
		Description: desc,
		Skills: []grain.Skill{
			grain.TypedSkill[struct{}, any](SkillConversation, "The agent's recorded conversation: its messages, tool calls and results, turns and token counts, as JSON."),
		},
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
	tools *toolSet
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

// save stores the record if it is still the version last loaded or saved.
func (a *agent) save(ctx context.Context) error {
	a.mu.Lock()
	data, err := json.Marshal(&a.rec)
	etag := a.etag
	a.mu.Unlock()
	if err != nil {
		a.stale = true
		return errs.Wrap(codes.Internal, err, "encode the conversation of %s", a.h.Address())
	}
	next, err := a.h.SaveState(stateContext{ctx}, data, etag)
	if err != nil {
		a.stale = true
		return err
	}
	a.mu.Lock()
	a.etag = next
	a.mu.Unlock()
	return nil
}

// stateContext is ctx without its values: the record's loads and saves
// are not made in the name of the request's idempotency key. The runtime
// would record the key with the turn's first save (a keyed save), so that
// a retry of the request, resuming the turn, could not save at all; the
// agent keeps its own record of the answers by key instead (Conversation's
// Answers). Deadline and cancellation are ctx's.
type stateContext struct{ context.Context }

func (stateContext) Value(any) any { return nil }

// OnMessage implements grain.Agent.
func (a *agent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	switch {
	case m.MessageType == SkillConversation:
		a.mu.Lock()
		defer a.mu.Unlock()
		return grain.JSONReply(m, &a.rec)
	case m.Kind == grain.KindOneWay && m.MessageType == ResumeReminder && m.From == a.h.Address().String():
		a.tick(ctx)
		return nil, nil
	case m.MessageType != "":
		return nil, errs.New(codes.InvalidArgument, "%s: no skill %q (ask with text, or %q)", a.h.Address(), clipText(m.MessageType, 64), SkillConversation)
	}
	if !a.enter() {
		return nil, errs.New(codes.FailedPrecondition, "%s is in a turn already: a tool of its turn asked it back", a.h.Address())
	}
	defer a.leave()
	if m.Kind != grain.KindRequest {
		return nil, nil
	}
	ans, err := a.ask(ctx, m)
	if err != nil {
		return nil, err
	}
	return reply(m, ans)
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
	return r, nil
}

// ask answers the request m: with the recorded answer of its idempotency
// key, by resuming its turn, or with a new turn (after finishing any turn
// left unfinished).
func (a *agent) ask(ctx context.Context, m *grain.Message) (Answer, error) {
	if a.stale {
		if err := a.load(ctx); err != nil {
			return Answer{}, err
		}
	}
	text := m.Message
	if text == "" && len(m.Data) > 0 {
		text = string(m.Data)
	}
	if strings.TrimSpace(text) == "" {
		return Answer{}, errs.New(codes.InvalidArgument, "%s: the request has no text", a.h.Address())
	}
	principal := principalOf(m)
	if ans, ok := a.rec.answer(m.IdempotencyKey, principal); ok {
		return ans, nil
	}
	if cur := a.rec.Current; cur != nil {
		if cur.Key != "" && cur.Key == m.IdempotencyKey && cur.Principal == principal {
			return a.run(ctx, a.liveRun(cur))
		}
		// A turn left unfinished by a crash comes first: the conversation
		// goes on from its end. If another principal started it, it may
		// not use this request's rights on other owners' agents.
		ans, err := a.run(ctx, runContext{ownOnly: cur.Principal != principal})
		if err != nil {
			return Answer{}, errs.Wrap(errs.Code(err), err, "%s: the turn %s, left unfinished, must end before a new one starts, and could not", a.h.Address(), cur.ID)
		}
		a.deliver(ctx, cur, ans)
	}
	now := a.t.opts.clk.Now()
	cur := &Turn{
		ID:        grain.NewID(),
		Key:       m.IdempotencyKey,
		From:      m.From,
		Principal: principal,
		Started:   now,
		Deadline:  now.Add(a.t.def.Limits.timeout()),
	}
	a.mu.Lock()
	cur.Start = len(a.rec.Messages)
	a.rec.Messages = append(a.rec.Messages, Message{Role: RoleUser, Text: text, Turn: cur.ID})
	a.rec.Current = cur
	a.mu.Unlock()
	if err := a.save(ctx); err != nil {
		return Answer{}, err
	}
	afterStep(ctx, stepStarted)
	if due := a.t.opts.resumeDue; due >= 0 {
		if err := a.h.RegisterReminder(ctx, ResumeReminder, due, a.t.opts.resumePeriod, ResumeReminder, cur.ID); err != nil {
			a.h.Logger().Warn("no reminder to resume the turn after a crash; only a retry of its request will", "turn", cur.ID, "err", err)
		}
	}
	return a.run(ctx, a.liveRun(cur))
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
// caller; with no such turn, it removes the reminder.
func (a *agent) tick(ctx context.Context) {
	if a.stale {
		if err := a.load(ctx); err != nil {
			a.h.Logger().Warn("resume: load the conversation", "err", err)
			return
		}
	}
	cur := a.rec.Current
	if cur == nil {
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
	a.deliver(ctx, cur, ans)
}

// deliver sends the answer of cur, a turn whose caller was not waiting
// for it when it ended, to the caller (a one-way message of AnswerType,
// naming the turn and the request's idempotency key in its state).
func (a *agent) deliver(ctx context.Context, cur *Turn, ans Answer) {
	if cur.From == "" {
		return
	}
	msg := &grain.Message{MessageType: AnswerType, Message: ans.Text, State: map[string]string{"turn": cur.ID, "key": cur.Key}}
	if ans.Code != codes.OK {
		msg.State["code"] = ans.Code.String()
		msg.State["error"] = ans.Error
	}
	if err := a.h.Send(ctx, cur.From, msg); err != nil {
		a.h.Logger().Debug("the answer of a resumed turn did not reach its caller", "turn", cur.ID, "to", cur.From, "err", err)
	}
}

func (a *agent) unregister(ctx context.Context) {
	if a.t.opts.resumeDue < 0 {
		return
	}
	if err := a.h.UnregisterReminder(ctx, ResumeReminder); err != nil && errs.Code(err) != codes.NotFound {
		a.h.Logger().Debug("remove the resume reminder", "err", err)
	}
}

// timeLeft is how long the turn may still run.
func (a *agent) timeLeft(cur *Turn) time.Duration {
	return cur.Deadline.Sub(a.t.opts.clk.Now())
}
