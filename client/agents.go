package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The agent lifecycle and discovery calls. Each takes an agent's address
// (Type:owner:alias, or Type:alias for the caller's own) and needs a
// permission on it: Read to look, Configure to change.

// AgentsOf lists the active agents of owner (empty: every owner the caller
// may read), of one type if typ is not empty. An operator (one who may
// administer the ACL) sees every activation.
func (c *Client) AgentsOf(ctx context.Context, owner, typ string) ([]AgentInfo, error) {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	r, err := gw.ListAgents(ctx, &agentsilov1.ListAgentsRequest{Type: typ, Owner: owner})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return agentInfos(r.GetAgents()), nil
}

// Types lists the agent types the cluster's silos host, by name, with their
// descriptions and skills; with a tag, only the types having a skill with
// that tag (compared without regard to case).
func (c *Client) Types(ctx context.Context, skillTag string) ([]AgentType, error) {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	r, err := gw.ListTypes(ctx, &agentsilov1.ListTypesRequest{SkillTag: skillTag})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return agentTypes(r.GetTypes()), nil
}

// Config returns the configuration CreateAgent stored for the agent, and
// false if none was (needs Read).
func (c *Client) Config(ctx context.Context, agent string) (map[string]string, bool, error) {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	r, err := gw.GetConfig(ctx, &agentsilov1.GetConfigRequest{Agent: agent})
	if err != nil {
		return nil, false, errs.FromStatus(err)
	}
	return r.GetConfig(), r.GetFound(), nil
}

// DeleteConfig removes the agent's stored configuration (needs Configure).
func (c *Client) DeleteConfig(ctx context.Context, agent string) error {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	_, err := gw.DeleteConfig(ctx, &agentsilov1.DeleteConfigRequest{Agent: agent})
	return errs.FromStatus(err)
}

// Deactivate ends the agent's activation after its current turn, wherever
// it lives (needs Configure), and says whether it was active. An agent
// that is not active is left alone (false: nothing was done). A gateway
// older than this answer does not say: then it is true.
func (c *Client) Deactivate(ctx context.Context, agent string) (wasActive bool, err error) {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	r, err := gw.Deactivate(ctx, &agentsilov1.DeactivateRequest{Agent: agent})
	if err != nil {
		return false, errs.FromStatus(err)
	}
	return r.WasActive == nil || *r.WasActive, nil
}

// UnregisterReminder removes the agent's reminder name (needs Configure);
// NotFound if it has none of that name.
func (c *Client) UnregisterReminder(ctx context.Context, agent, name string) error {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	_, err := gw.UnregisterReminder(ctx, &agentsilov1.UnregisterReminderRequest{Agent: agent, Name: name})
	return errs.FromStatus(err)
}

// State returns the agent's stored state and its etag (needs Read); an
// empty etag means the agent has none.
func (c *Client) State(ctx context.Context, agent string) (data []byte, etag string, err error) {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	r, err := gw.GetState(ctx, &agentsilov1.GetStateRequest{Agent: agent})
	if err != nil {
		return nil, "", errs.FromStatus(err)
	}
	return r.GetData(), r.GetEtag(), nil
}

// DeleteState removes the agent's stored state (needs Configure): with an
// etag, only if it is still that version (else ErrAborted); with "", whatever
// is stored.
func (c *Client) DeleteState(ctx context.Context, agent, etag string) error {
	ctx, cancel, gw := c.unary(ctx)
	defer cancel()
	_, err := gw.DeleteState(ctx, &agentsilov1.DeleteStateRequest{Agent: agent, Etag: etag})
	return errs.FromStatus(err)
}
