package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The ACL methods below call the admin service of the gateway. They need
// Admin on the pseudo-agent system:acl, or membership of group admins;
// others get PermissionDenied. Changes are in force on that gateway's silo
// when they return, and cluster-wide within a second. Each takes a
// revision: 0 applies the change to whatever is stored; another value must
// be the revision read before (compare-and-swap), else Aborted.

// ACLRules returns the rules in order, the revision of the ACL, and, while
// no rules are set, the seed rule that applies instead (else nil).
func (c *Client) ACLRules(ctx context.Context) (rules []ACLRule, seed *ACLRule, revision int64, err error) {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	r, err := adm.ListRules(ctx, &agentsilov1.ListRulesRequest{})
	if err != nil {
		return nil, nil, 0, errs.FromStatus(err)
	}
	rules = make([]ACLRule, len(r.GetRules()))
	for i, rule := range r.GetRules() {
		rules[i] = *aclRule(rule)
	}
	return rules, aclRule(r.GetSeedRule()), r.GetRevision(), nil
}

// AddACLRule inserts rule (its ID ignored) at position (1 for the first;
// 0 appends) and returns it with the ID it got, and its position.
func (c *Client) AddACLRule(ctx context.Context, rule ACLRule, position int, revision int64) (ACLRule, int, error) {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	r, err := adm.AddRule(ctx, &agentsilov1.AddRuleRequest{Rule: rule.wire(), Position: int32(position), Revision: revision})
	if err != nil {
		return ACLRule{}, 0, errs.FromStatus(err)
	}
	added := rule
	if a := aclRule(r.GetRule()); a != nil {
		added = *a
	}
	return added, int(r.GetPosition()), nil
}

// UpdateACLRule replaces the rule with rule.ID.
func (c *Client) UpdateACLRule(ctx context.Context, rule ACLRule, revision int64) error {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	_, err := adm.UpdateRule(ctx, &agentsilov1.UpdateRuleRequest{Rule: rule.wire(), Revision: revision})
	return errs.FromStatus(err)
}

// RemoveACLRule removes the rule with id.
func (c *Client) RemoveACLRule(ctx context.Context, id uint64, revision int64) error {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	_, err := adm.RemoveRule(ctx, &agentsilov1.RemoveRuleRequest{Id: id, Revision: revision})
	return errs.FromStatus(err)
}

// ACLGroups returns the ACL's groups and their members.
func (c *Client) ACLGroups(ctx context.Context) (map[string][]string, error) {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	r, err := adm.ListGroups(ctx, &agentsilov1.ListGroupsRequest{})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	out := make(map[string][]string, len(r.GetGroups()))
	for _, g := range r.GetGroups() {
		out[g.GetName()] = g.GetMembers()
	}
	return out, nil
}

// SetACLGroup sets the members of group name; none removes it.
func (c *Client) SetACLGroup(ctx context.Context, name string, members []string, revision int64) error {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	_, err := adm.SetGroup(ctx, &agentsilov1.SetGroupRequest{Group: &agentsilov1.AclGroup{Name: name, Members: members}, Revision: revision})
	return errs.FromStatus(err)
}

// CheckACL explains whether caller (with groups, beside the ACL's) holds
// permission on agent (`Type:owner:alias` or `owner:alias`): allowed or
// not, and why (own agent, the rule that matched, or default deny).
func (c *Client) CheckACL(ctx context.Context, caller, agent, permission string, groups ...string) (Decision, error) {
	ctx, cancel, adm := c.admin(ctx)
	defer cancel()
	r, err := adm.Check(ctx, &agentsilov1.CheckRequest{Caller: caller, Groups: groups, Agent: agent, Permission: permission})
	if err != nil {
		return Decision{}, errs.FromStatus(err)
	}
	return Decision{Allowed: r.GetAllowed(), Reason: r.GetReason(), Rule: aclRule(r.GetRule()), Position: int(r.GetPosition()), Granted: r.GetGranted()}, nil
}

// admin prepares a call to the admin service of the session's gateway.
func (c *Client) admin(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.AclAdminClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewAclAdminClient(c.conns[c.connIndex()])
}
