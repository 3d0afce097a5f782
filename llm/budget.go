package llm

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
)

// The daily token budget of an owner. The tokens its agents' model calls
// spend (input and output) are counted by one agent per owner,
// BudgetType:<owner>:tokens, in its durable state (the silo's state
// store, shared by every silo, surviving any crash): the day (UTC, as the
// charging agent's clock says) and the tokens of that day. A model agent
// whose type has a budget (Limits.OwnerDailyTokens; package cluster
// lowers it to the silo's --llm-owner-daily-tokens for declared types)
// asks it before a turn starts and before each model call (refused, or
// ended, with ResourceExhausted once the day's tokens reached the
// budget), and charges it each model response before recording it, with
// an Ask keyed by the step (<agent>/<turn>/<round>): a retried charge, or
// the charge of a step asked again after a crash, counts once (the
// runtime's keyed save, and the keys the counter keeps of the day).
//
// The agent's owner is charged, whoever the principal of the turn: the
// owner's agents spend, whoever asks them.

// BudgetType is the built-in agent type that counts an owner's tokens of
// the day (RegisterBudget registers it; Register does when the definition
// has a budget). Its one agent per owner is BudgetType:<owner>:tokens.
const BudgetType = "LLMBudget"

// BudgetAlias is the alias of an owner's budget agent.
const BudgetAlias = "tokens"

// The budget agent's skills: usage (anyone who may message it) answers
// a BudgetUsage as JSON; charge is taken from agents of its owner only.
const (
	SkillBudgetUsage = "usage"
	skillCharge      = "charge"
)

// BudgetQuery is the input of SkillBudgetUsage.
type BudgetQuery struct {
	Day string `json:"day,omitempty" jsonschema:"the day, UTC, as 2006-01-02 (default: the last day counted)"`
}

// BudgetUsage is what an owner's budget agent answers to SkillBudgetUsage.
type BudgetUsage struct {
	// Day is the day counted (UTC, 2006-01-02); Tokens the tokens spent
	// on it.
	Day    string `json:"day"`
	Tokens int64  `json:"tokens"`
}

// RegisterBudget registers BudgetType in reg if it has no type of that
// name yet.
func RegisterBudget(reg *grain.Registry) error {
	if _, ok := reg.Info(BudgetType); ok {
		return nil
	}
	err := reg.Register(BudgetType, func(h grain.Host) (grain.Agent, error) {
		return &budgetAgent{h: h, st: grain.NewState[budgetRecord](h)}, nil
	}, grain.TypeInfo{
		Description: "Counts the tokens the model agents of its owner spend in a day (UTC): one agent per owner, alias tokens.",
		Skills: []grain.Skill{
			grain.TypedSkill[BudgetQuery, BudgetUsage](SkillBudgetUsage, "The tokens spent on a day (UTC), by default the last day counted."),
		},
	})
	if err != nil {
		if _, ok := reg.Info(BudgetType); ok {
			return nil // registered meanwhile
		}
	}
	return err
}

// budgetRecord is a budget agent's state.
type budgetRecord struct {
	Day    string `json:"day"`
	Tokens int64  `json:"tokens"`
	// Keys are the day's last charges' keys (a charge again after the
	// runtime forgot its key still counts once).
	Keys []string `json:"keys,omitempty"`
}

// maxBudgetKeys bounds budgetRecord.Keys.
const maxBudgetKeys = 256

type budgetAgent struct {
	h  grain.Host
	st *grain.State[budgetRecord]
	// stale: a save failed, and the value may hold a change not stored.
	stale bool
}

func (b *budgetAgent) OnActivate(ctx context.Context) error { return b.st.Load(ctx) }

func (b *budgetAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if b.stale {
		if err := b.st.Load(ctx); err != nil {
			return nil, err
		}
		b.stale = false
	}
	switch m.MessageType {
	case SkillBudgetUsage:
		return grain.TypedHandler(func(_ context.Context, q BudgetQuery) (BudgetUsage, error) {
			if q.Day == "" {
				q.Day = b.st.Value.Day
			}
			return b.usage(q.Day), nil
		})(ctx, m)
	case skillCharge:
	default:
		return nil, errs.New(codes.InvalidArgument, "%s: no skill %q (ask %q)", b.h.Address(), clipText(m.MessageType, 64), SkillBudgetUsage)
	}
	from, err := grain.Resolve(m.From, "")
	if err != nil || from.Owner != b.h.Owner() || from.Type == grain.SessionType {
		return nil, errs.New(codes.PermissionDenied, "%s: only its owner's agents charge it", b.h.Address())
	}
	day := m.State["day"]
	n, err := strconv.ParseInt(m.State["tokens"], 10, 64)
	if err != nil || n < 0 || len(day) != len(dayLayout) || m.IdempotencyKey == "" {
		return nil, errs.New(codes.InvalidArgument, "%s: a charge names a day, a number of tokens and an idempotency key", b.h.Address())
	}
	err = b.st.Update(ctx, func(r *budgetRecord) error {
		switch {
		case day > r.Day:
			*r = budgetRecord{Day: day}
		case day < r.Day, slices.Contains(r.Keys, m.IdempotencyKey):
			return errUnchanged // a day past, or counted already
		}
		r.Tokens += n
		r.Keys = append(r.Keys, m.IdempotencyKey)
		if len(r.Keys) > maxBudgetKeys {
			r.Keys = slices.Clone(r.Keys[len(r.Keys)-maxBudgetKeys:])
		}
		return nil
	})
	if err != nil && err != errUnchanged {
		b.stale = true
		return nil, err
	}
	return grain.JSONReply(m, b.usage(day))
}

func (b *budgetAgent) usage(day string) BudgetUsage {
	if day != b.st.Value.Day {
		return BudgetUsage{Day: day}
	}
	return BudgetUsage{Day: day, Tokens: b.st.Value.Tokens}
}

// errUnchanged leaves a grain.State unchanged from Update; it never
// leaves the agent.
var errUnchanged = errs.New(codes.AlreadyExists, "counted already")

// dayLayout is how a budget's day is written.
const dayLayout = "2006-01-02"

// dailyTokens is the budget of the type's agents' owner; 0 for none.
func (t *agentType) dailyTokens() int64 { return t.def.Limits.OwnerDailyTokens }

// budgetAddr is the agent counting the tokens of a's owner.
func (a *agent) budgetAddr() string {
	return grain.Address{Type: BudgetType, Owner: a.h.Owner(), Alias: BudgetAlias}.String()
}

func (a *agent) today() string { return a.t.opts.clk.Now().UTC().Format(dayLayout) }

// checkBudget returns ResourceExhausted if the owner spent its tokens of
// the day, the error of the ask if the budget agent cannot say, and nil
// otherwise (or with no budget).
func (a *agent) checkBudget(ctx context.Context) error {
	limit := a.t.dailyTokens()
	if limit == 0 {
		return nil
	}
	day := a.today()
	q, err := json.Marshal(BudgetQuery{Day: day})
	if err != nil {
		return errs.Wrap(codes.Internal, err, "encode a budget query")
	}
	r, err := a.h.Ask(ctx, a.budgetAddr(), &grain.Message{MessageType: SkillBudgetUsage, DataType: grain.JSONType, Data: q})
	if err != nil {
		return errs.Wrap(errs.Code(err), err, "%s: the owner's token budget", a.h.Address())
	}
	var u BudgetUsage
	if err := json.Unmarshal(r.Data, &u); err != nil {
		return errs.Wrap(codes.Internal, err, "%s: the owner's token budget does not decode", a.h.Address())
	}
	if u.Tokens >= limit {
		return errs.New(codes.ResourceExhausted, "%s: owner %s spent its daily token budget (%d of %d tokens on %s, UTC; limits.owner_daily_tokens or the silo's --llm-owner-daily-tokens)", a.h.Address(), a.h.Owner(), u.Tokens, limit, day)
	}
	return nil
}

// charge counts a model response's tokens to the owner's budget, once per
// step of the turn (the key names the agent, the turn and the round).
func (a *agent) charge(ctx context.Context, cur *Turn, round int, u Usage) error {
	if a.t.dailyTokens() == 0 {
		return nil
	}
	key := a.h.Address().String() + "/" + cur.ID + "/" + strconv.Itoa(round)
	_, err := a.h.Ask(ctx, a.budgetAddr(), &grain.Message{
		MessageType:    skillCharge,
		IdempotencyKey: key,
		State:          map[string]string{"day": a.today(), "tokens": strconv.FormatInt(u.InputTokens+u.OutputTokens, 10)},
	})
	if errs.Code(err) == codes.AlreadyExists {
		return nil // counted by an earlier attempt whose reply was lost
	}
	if err != nil {
		return errs.Wrap(errs.Code(err), err, "%s: charge the owner's token budget", a.h.Address())
	}
	return nil
}
