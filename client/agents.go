package client

import (
	"context"
	"strings"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Agents is the agents' lifecycle: creating one, listing the active ones,
// and an agent's configuration, state, reminders and activation. Reach it
// with Client.Agents. Each call takes an agent's address
// (Type:owner:alias, or Type:alias for the caller's own) and needs a
// permission on it: Read to look, Configure to change.
type Agents struct{ c *Client }

// Agents returns the client's agent lifecycle calls.
func (c *Client) Agents() Agents { return Agents{c} }

// AgentConfig is an agent's stored configuration as Agents.Config reads
// it.
type AgentConfig struct {
	// Values is the configuration Create stored.
	Values map[string]string
	// Found is false if none was stored.
	Found bool
}

// AgentState is an agent's stored state as Agents.State reads it.
type AgentState struct {
	Data []byte
	// ETag is the stored version, for IfETag; "" if the agent has no
	// state.
	ETag string
}

// Create stores the configuration of the agent at addr, which its
// activations read lazily, and returns its canonical address.
func (a Agents) Create(ctx context.Context, addr string, cfg map[string]string) (string, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.CreateAgent(ctx, &agentsilov1.CreateAgentRequest{Address: addr, Config: cfg})
	if err != nil {
		return "", errs.FromStatus(err)
	}
	return r.GetAddress(), nil
}

// List lists the active agents of owner ("": every owner the caller may
// read), of type typ if it is not empty. An operator (one who may
// administer the ACL) sees every activation.
func (a Agents) List(ctx context.Context, owner, typ string) ([]AgentInfo, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: typ, Owner: owner})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return agentInfos(r.GetAgents()), nil
}

// Stored lists the agents of type typ and owner that have state in the
// cluster's state store, whether active or not, by address, in alias
// order: one page (the listing keeps those the caller may Read).
// Options: After (an alias, a page's Next) and Limit (default 1000, at
// most 10000).
func (a Agents) Stored(ctx context.Context, typ, owner string, opts ...CallOption) (Page[string], error) {
	o, err := callOpts("list the agents with state", opts, optAfter|optLimit)
	if err != nil {
		return Page[string]{}, err
	}
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: typ, Owner: owner, Stored: true, After: o.after, Limit: uint32(min(max(o.limit, 0), 1<<30))})
	if err != nil {
		return Page[string]{}, errs.FromStatus(err)
	}
	out := Page[string]{Items: make([]string, len(r.GetAgents()))}
	for i, ai := range r.GetAgents() {
		out.Items[i] = ai.GetAddress()
	}
	limit := o.limit
	if limit == 0 {
		limit = defaultStoredPage
	}
	if n := len(out.Items); n > 0 && n >= limit {
		// A full page: more may follow, after its last alias.
		last := out.Items[n-1]
		out.Next = last[strings.LastIndexByte(last, ':')+1:]
	}
	return out, nil
}

// defaultStoredPage is the gateway's page of Stored without Limit.
const defaultStoredPage = 1000

// Config returns the configuration Create stored for the agent, Found
// false if none was (needs Read).
func (a Agents) Config(ctx context.Context, agent string) (AgentConfig, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.GetConfig(ctx, &agentsilov1.GetConfigRequest{Agent: agent})
	if err != nil {
		return AgentConfig{}, errs.FromStatus(err)
	}
	return AgentConfig{Values: r.GetConfig(), Found: r.GetFound()}, nil
}

// DeleteConfig removes the agent's stored configuration (needs Configure).
func (a Agents) DeleteConfig(ctx context.Context, agent string) error {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	_, err := gw.DeleteConfig(ctx, &agentsilov1.DeleteConfigRequest{Agent: agent})
	return errs.FromStatus(err)
}

// State returns the agent's stored state and its etag (needs Read); an
// empty etag means the agent has none.
func (a Agents) State(ctx context.Context, agent string) (AgentState, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.GetState(ctx, &agentsilov1.GetStateRequest{Agent: agent})
	if err != nil {
		return AgentState{}, errs.FromStatus(err)
	}
	return AgentState{Data: r.GetData(), ETag: r.GetEtag()}, nil
}

// DeleteState removes the agent's stored state (needs Configure): with
// IfETag, only if it is still that version (else ErrAborted); without,
// whatever is stored. Options: IfETag.
func (a Agents) DeleteState(ctx context.Context, agent string, opts ...CallOption) error {
	o, err := callOpts("delete state", opts, optETag)
	if err != nil {
		return err
	}
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	_, err = gw.DeleteState(ctx, &agentsilov1.DeleteStateRequest{Agent: agent, Etag: o.etag})
	return errs.FromStatus(err)
}

// Reminders lists the durable reminders of the agent (needs Read).
func (a Agents) Reminders(ctx context.Context, agent string) ([]Reminder, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.ListReminders(ctx, &agentsilov1.ListRemindersRequest{Agent: agent})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return reminders(r.GetReminders()), nil
}

// UnregisterReminder removes the agent's reminder name (needs Configure);
// NotFound if it has none of that name.
func (a Agents) UnregisterReminder(ctx context.Context, agent, name string) error {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	_, err := gw.UnregisterReminder(ctx, &agentsilov1.UnregisterReminderRequest{Agent: agent, Name: name})
	return errs.FromStatus(err)
}

// Deactivate ends the agent's activation after its current turn, wherever
// it lives (needs Configure), and says whether it was active. An agent
// that is not active is left alone (false: nothing was done). A gateway
// older than this answer does not say: then it is true.
func (a Agents) Deactivate(ctx context.Context, agent string) (wasActive bool, err error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.Deactivate(ctx, &agentsilov1.DeactivateRequest{Agent: agent})
	if err != nil {
		return false, errs.FromStatus(err)
	}
	return r.WasActive == nil || *r.WasActive, nil
}
