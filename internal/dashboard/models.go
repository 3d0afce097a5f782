package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/llm"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The model agents: agents of the types package llm builds (llm.Register,
// llm.Factory, and the types declared without code). A type is a model
// type when the cluster lists it (the gateway's ListTypes, code-registered
// and declared types alike) with the skill llm.SkillConversation, the
// skill llm gives every type it builds and the one `client conversation`
// reads: the test the CLI makes. An agent's record (llm.Conversation) is
// read from its stored state, where the agent saves it after every step of
// a turn (so a turn in progress shows as far as it got), through the
// gateway's GetState: it needs Read on the agent, as the agent page's
// state does, it activates nothing and it does not count as the agent's
// activity, so an open page does not keep agents from being deactivated
// when idle. (The conversation skill returns the same record but is an
// Ask: it needs Message, and it would activate an agent that is not.)

// maxRecords bounds the records the models page reads per refresh: those
// of the most recently active model agents.
const maxRecords = 100

// recordReads bounds the records read at once.
const recordReads = 8

// maxTurnsShown bounds the turns a model agent's page shows: the last.
const maxTurnsShown = 50

// Lengths, in characters, past which a conversation's texts are cut: the
// user's and the model's, and tool calls' arguments and results.
const (
	clipMessage = 2000
	clipTool    = 300
)

// isModelType reports whether t is a model agent type (see above).
func isModelType(t *agentsilov1.AgentType) bool {
	return slices.ContainsFunc(t.GetSkills(), func(s *agentsilov1.Skill) bool { return s.GetName() == llm.SkillConversation })
}

// modelTypes returns the cluster's model agent types, by name.
func (d *Dashboard) modelTypes(ctx context.Context) ([]*agentsilov1.AgentType, error) {
	resp, err := d.gw.ListTypes(ctx, &agentsilov1.ListTypesRequest{})
	if err != nil {
		return nil, err
	}
	var out []*agentsilov1.AgentType
	for _, t := range resp.GetTypes() {
		if isModelType(t) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *agentsilov1.AgentType) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// modelTypeRow is one model agent type on the models page.
type modelTypeRow struct {
	Name, Description string
	Declared          bool
	Agents            int // active agents the principal may read
	Read              int // of them, those whose records were read
	Running           int // of those, in a turn
	Usage             llm.Usage
	Metered           *metered // this silo's metrics of the type; nil: none
}

// metered is what this silo's metrics count of a model agent type since
// the silo started.
type metered struct {
	Calls, Input, Output float64
}

// modelAgentRow is one active model agent on the models page.
type modelAgentRow struct {
	Address, Silo string
	LastActive    time.Time
	Read          bool // its record was read
	Turns         int  // turns ended (as far as the record keeps them)
	Running       bool
	Usage         llm.Usage
	Error         string
}

// modelsView is the models page's data.
type modelsView struct {
	Types    []modelTypeRow
	Agents   []modelAgentRow
	Total    int // active model agents the principal may read
	Unread   int // of them, past maxRecords: not read
	Metrics  bool
	Errors   []string
	MaxShown int
}

// recordSummary is the part of a record the models page shows.
type recordSummary struct {
	Turns   []struct{} `json:"turns"`
	Current *struct{}  `json:"current"`
	Usage   llm.Usage  `json:"usage"`
}

func (d *Dashboard) modelsData(ctx context.Context, _ *session, _ *http.Request) (any, error) {
	v := &modelsView{Metrics: d.cfg.Metrics != nil, MaxShown: maxRecords}
	types, err := d.modelTypes(ctx)
	if err != nil {
		return v, err
	}
	metrics := d.llmMetrics()
	byType := map[string]int{}
	var agents []*agentsilov1.ActivationInfo
	for _, t := range types {
		row := modelTypeRow{Name: t.GetName(), Description: t.GetDescription(), Declared: t.GetDeclared(), Metered: metrics[t.GetName()]}
		if row.Metered == nil && v.Metrics {
			row.Metered = &metered{}
		}
		list, err := d.gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: t.GetName()})
		if err != nil {
			v.Errors = append(v.Errors, fmt.Sprintf("agents of %s: %s", t.GetName(), message(err)))
		}
		row.Agents = len(list.GetAgents())
		agents = append(agents, list.GetAgents()...)
		byType[row.Name] = len(v.Types)
		v.Types = append(v.Types, row)
	}
	v.Total = len(agents)
	shown := latest(agents, maxRecords)
	v.Unread = v.Total - len(shown)
	v.Agents = make([]modelAgentRow, len(shown))
	sem := make(chan struct{}, recordReads)
	var wg sync.WaitGroup
	for i, a := range shown {
		v.Agents[i] = modelAgentRow{Address: a.GetAddress(), Silo: a.GetSilo(), LastActive: a.GetLastActive().AsTime()}
		wg.Add(1)
		sem <- struct{}{}
		go func(row *modelAgentRow) {
			defer func() { <-sem; wg.Done() }()
			var rec recordSummary
			if err := d.readRecord(ctx, row.Address, &rec); err != nil {
				row.Error = message(err)
				return
			}
			row.Read, row.Turns, row.Running, row.Usage = true, len(rec.Turns), rec.Current != nil, rec.Usage
		}(&v.Agents[i])
	}
	wg.Wait()
	for _, a := range v.Agents {
		typ, _, _ := strings.Cut(a.Address, ":")
		i, ok := byType[typ]
		if !ok || !a.Read {
			continue
		}
		t := &v.Types[i]
		t.Read++
		t.Usage.InputTokens += a.Usage.InputTokens
		t.Usage.OutputTokens += a.Usage.OutputTokens
		if a.Running {
			t.Running++
		}
	}
	return v, nil
}

// readRecord reads the model agent addr's record from its stored state
// into into (a record that is not stored yet reads as empty).
func (d *Dashboard) readRecord(ctx context.Context, addr string, into any) error {
	st, err := d.gw.GetState(ctx, &agentsilov1.GetStateRequest{Agent: addr})
	if err != nil {
		return err
	}
	if !st.GetFound() || len(st.GetData()) == 0 {
		return nil
	}
	if err := json.Unmarshal(st.GetData(), into); err != nil {
		return errs.Wrap(codes.DataLoss, err, "the state of %s is not a model agent's record", addr)
	}
	return nil
}

// llmMetrics sums this silo's model agent metrics by type: model calls
// and tokens in and out.
func (d *Dashboard) llmMetrics() map[string]*metered {
	if d.cfg.Metrics == nil {
		return nil
	}
	mfs, err := d.cfg.Metrics.Gather()
	if err != nil && len(mfs) == 0 {
		return nil
	}
	return sumLLMMetrics(mfs)
}

func sumLLMMetrics(mfs []*dto.MetricFamily) map[string]*metered {
	out := map[string]*metered{}
	get := func(typ string) *metered {
		m := out[typ]
		if m == nil {
			m = &metered{}
			out[typ] = m
		}
		return m
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "agentsilo_llm_calls_total":
			for _, m := range mf.GetMetric() {
				get(label(m, "type")).Calls += m.GetCounter().GetValue()
			}
		case "agentsilo_llm_tokens_total":
			for _, m := range mf.GetMetric() {
				switch label(m, "direction") {
				case "input":
					get(label(m, "type")).Input += m.GetCounter().GetValue()
				case "output":
					get(label(m, "type")).Output += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// modelView is one model agent's page: its conversation turn by turn.
type modelView struct {
	Address string
	Type    *agentsilov1.AgentType
	Active  *agentRow
	Found   bool // a record is stored
	Turns   []turnView
	Omitted int // turns before those shown
	Ended   int // turns ended, as far as the record keeps them
	Running bool
	Usage   llm.Usage
	Errors  []string
}

// turnView is one turn of a conversation.
type turnView struct {
	ID            string
	From, Trigger string
	Started       time.Time
	Took          time.Duration
	Rounds        int
	Usage         llm.Usage
	Running       bool
	Summarized    bool // its summary is kept (else it was trimmed)
	Error         string
	Entries       []entryView
}

// entryView is one line of a turn: what the user said, what the model
// answered, a tool call it made, or a tool's result.
type entryView struct {
	Kind    string // user, model, call, result, other
	Role    string // other's role
	Name    string // the tool's
	CallID  string
	Text    string
	IsError bool // a tool result that is an error
	Running bool // a call of the turn in progress without a result yet
}

func (d *Dashboard) modelData(ctx context.Context, _ *session, r *http.Request) (any, error) {
	addr := clip(r.URL.Query().Get("addr"))
	v := &modelView{Address: addr}
	if addr == "" {
		return v, nil
	}
	typ, _, _ := strings.Cut(addr, ":")
	resp, err := d.gw.ListTypes(ctx, &agentsilov1.ListTypesRequest{})
	if err != nil {
		return v, err
	}
	for _, t := range resp.GetTypes() {
		if t.GetName() == typ {
			v.Type = t
		}
	}
	switch {
	case v.Type == nil:
		return v, errs.New(codes.NotFound, "the cluster hosts no agent type %s", typ)
	case !isModelType(v.Type):
		return v, errs.New(codes.InvalidArgument, "%s is not a model agent: its type %s has no %s skill", addr, typ, llm.SkillConversation)
	}
	st, err := d.gw.GetState(ctx, &agentsilov1.GetStateRequest{Agent: addr})
	if err != nil {
		return v, err
	}
	v.Address, v.Found = st.GetAddress(), st.GetFound()
	var rec llm.Conversation
	if len(st.GetData()) > 0 {
		if err := json.Unmarshal(st.GetData(), &rec); err != nil {
			return v, errs.Wrap(codes.DataLoss, err, "the state of %s is not a model agent's record", v.Address)
		}
	}
	v.Turns, v.Omitted = turns(&rec, maxTurnsShown)
	v.Ended, v.Running, v.Usage = len(rec.Turns), rec.Current != nil, rec.Usage
	_, rest, _ := strings.Cut(v.Address, ":") // canonical: Type:alias names the principal's own
	owner, _, _ := strings.Cut(rest, ":")
	list, err := d.gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: typ, Owner: owner})
	if err != nil {
		v.Errors = append(v.Errors, "activation: "+message(err))
	}
	for _, a := range list.GetAgents() {
		if a.GetAddress() == v.Address {
			v.Active = &agentRow{Address: a.GetAddress(), Silo: a.GetSilo(), LastActive: a.GetLastActive().AsTime(), Mailbox: a.GetMailboxDepth()}
		}
	}
	return v, nil
}

// turns groups rec's messages by turn, in order, the turn in progress
// marked running (and its calls without a result), and returns the last
// max of them with how many came before.
func turns(rec *llm.Conversation, max int) ([]turnView, int) {
	summaries := make(map[string]llm.TurnSummary, len(rec.Turns))
	for _, s := range rec.Turns {
		summaries[s.ID] = s
	}
	results := map[string]bool{}
	for _, m := range rec.Messages {
		if m.Role == llm.RoleTool {
			results[m.ToolCallID] = true
		}
	}
	cur := rec.Current
	header := func(id string) turnView {
		t := turnView{ID: id}
		if cur != nil && cur.ID == id {
			t.Running, t.From, t.Trigger, t.Started, t.Rounds, t.Usage = true, cur.From, cur.Trigger, cur.Started, cur.Rounds, cur.Usage
		} else if s, ok := summaries[id]; ok {
			t.Summarized, t.From, t.Trigger, t.Started, t.Rounds, t.Usage, t.Error = true, s.From, s.Trigger, s.Started, s.Rounds, s.Usage, s.Error
			t.Took = s.Ended.Sub(s.Started).Round(time.Millisecond)
		}
		return t
	}
	var out []turnView
	for i, m := range rec.Messages {
		if i == 0 || m.Turn != rec.Messages[i-1].Turn {
			out = append(out, header(m.Turn))
		}
		t := &out[len(out)-1]
		switch m.Role {
		case llm.RoleUser:
			t.Entries = append(t.Entries, entryView{Kind: "user", Text: clipRunes(m.Text, clipMessage)})
		case llm.RoleAssistant:
			if m.Text != "" || len(m.ToolCalls) == 0 {
				t.Entries = append(t.Entries, entryView{Kind: "model", Text: clipRunes(m.Text, clipMessage)})
			}
			for _, c := range m.ToolCalls {
				t.Entries = append(t.Entries, entryView{Kind: "call", Name: c.Name, CallID: c.ID, Text: clipRunes(flatten(c.Arguments), clipTool), Running: t.Running && !results[c.ID]})
			}
		case llm.RoleTool:
			t.Entries = append(t.Entries, entryView{Kind: "result", Name: m.Name, CallID: m.ToolCallID, Text: clipRunes(m.Text, clipTool), IsError: m.IsError})
		default:
			t.Entries = append(t.Entries, entryView{Kind: "other", Role: m.Role, Text: clipRunes(m.Text, clipMessage)})
		}
	}
	if cur != nil && !slices.ContainsFunc(out, func(t turnView) bool { return t.ID == cur.ID }) {
		out = append(out, header(cur.ID)) // started, its message not recorded yet
	}
	if len(out) > max {
		return out[len(out)-max:], len(out) - max
	}
	return out, 0
}

// flatten puts JSON arguments on one line.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

// clipRunes cuts s after n characters, saying how much it left out.
func clipRunes(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return fmt.Sprintf("%s… (%d more bytes)", s[:j], len(s)-j)
		}
		i++
	}
	return s
}

// tokens writes a token count: in and out.
func tokens(u llm.Usage) string {
	return fmt.Sprintf("%d in, %d out", u.InputTokens, u.OutputTokens)
}
