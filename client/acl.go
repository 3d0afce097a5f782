package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// ACL administers the cluster's access control list through the admin
// service of the session's gateway: its rules, its groups, and Check,
// which explains a decision. Reach it with Client.ACL.
//
// Every call needs Admin on the pseudo-agent system:acl, or membership of
// group admins; others get PermissionDenied. Changes are in force on that
// gateway's silo when they return, and cluster-wide within a second. A
// change takes IfRevision: the revision Rules read, else Aborted.
type ACL struct{ c *Client }

// ACL returns the client's ACL administration.
func (c *Client) ACL() ACL { return ACL{c} }

// ACLRules is the ACL's rules as Rules reads them.
type ACLRules struct {
	// Rules are the rules in order.
	Rules []ACLRule
	// Seed is, while no rules are set, the seed rule that applies instead
	// (else nil).
	Seed *ACLRule
	// Revision is the ACL's revision, for IfRevision.
	Revision int64
}

// AddedRule is the rule ACL.AddRule added, with its ID, and its position
// (1 for the first).
type AddedRule struct {
	Rule     ACLRule
	Position int
}

// Rules returns the rules in order, the seed rule while there are none,
// and the ACL's revision.
func (a ACL) Rules(ctx context.Context) (ACLRules, error) {
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	r, err := adm.ListRules(ctx, &agentsilov1.ListRulesRequest{})
	if err != nil {
		return ACLRules{}, errs.FromStatus(err)
	}
	rules := make([]ACLRule, len(r.GetRules()))
	for i, rule := range r.GetRules() {
		rules[i] = *aclRule(rule)
	}
	return ACLRules{Rules: rules, Seed: aclRule(r.GetSeedRule()), Revision: r.GetRevision()}, nil
}

// AddRule inserts rule (its ID ignored) at the end, or At a position, and
// returns it with the ID it got, and its position. Options: At,
// IfRevision.
func (a ACL) AddRule(ctx context.Context, rule ACLRule, opts ...CallOption) (AddedRule, error) {
	o, err := callOpts("add ACL rule", opts, optAt|optRevision)
	if err != nil {
		return AddedRule{}, err
	}
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	r, err := adm.AddRule(ctx, &agentsilov1.AddRuleRequest{Rule: rule.wire(), Position: int32(min(o.at, 1<<30)), Revision: o.revision})
	if err != nil {
		return AddedRule{}, errs.FromStatus(err)
	}
	added := rule
	if r := aclRule(r.GetRule()); r != nil {
		added = *r
	}
	return AddedRule{Rule: added, Position: int(r.GetPosition())}, nil
}

// UpdateRule replaces the rule with rule.ID. Options: IfRevision.
func (a ACL) UpdateRule(ctx context.Context, rule ACLRule, opts ...CallOption) error {
	o, err := callOpts("update ACL rule", opts, optRevision)
	if err != nil {
		return err
	}
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	_, err = adm.UpdateRule(ctx, &agentsilov1.UpdateRuleRequest{Rule: rule.wire(), Revision: o.revision})
	return errs.FromStatus(err)
}

// RemoveRule removes the rule with id. Options: IfRevision.
func (a ACL) RemoveRule(ctx context.Context, id uint64, opts ...CallOption) error {
	o, err := callOpts("remove ACL rule", opts, optRevision)
	if err != nil {
		return err
	}
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	_, err = adm.RemoveRule(ctx, &agentsilov1.RemoveRuleRequest{Id: id, Revision: o.revision})
	return errs.FromStatus(err)
}

// Groups returns the ACL's groups and their members.
func (a ACL) Groups(ctx context.Context) (map[string][]string, error) {
	ctx, cancel, adm := a.c.aclAdmin(ctx)
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

// SetGroup sets the members of group name; none removes it. Options:
// IfRevision.
func (a ACL) SetGroup(ctx context.Context, name string, members []string, opts ...CallOption) error {
	o, err := callOpts("set ACL group", opts, optRevision)
	if err != nil {
		return err
	}
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	_, err = adm.SetGroup(ctx, &agentsilov1.SetGroupRequest{Group: &agentsilov1.AclGroup{Name: name, Members: members}, Revision: o.revision})
	return errs.FromStatus(err)
}

// Check explains whether caller (InGroups: with groups beside the ACL's)
// holds permission on agent (`Type:owner:alias` or `owner:alias`): allowed
// or not, and why (own agent, the rule that matched, or default deny).
// Options: InGroups.
func (a ACL) Check(ctx context.Context, caller, agent, permission string, opts ...CallOption) (Decision, error) {
	o, err := callOpts("check ACL", opts, optGroups)
	if err != nil {
		return Decision{}, err
	}
	ctx, cancel, adm := a.c.aclAdmin(ctx)
	defer cancel()
	r, err := adm.Check(ctx, &agentsilov1.CheckRequest{Caller: caller, Groups: o.groups, Agent: agent, Permission: permission})
	if err != nil {
		return Decision{}, errs.FromStatus(err)
	}
	return Decision{Allowed: r.GetAllowed(), Reason: r.GetReason(), Rule: aclRule(r.GetRule()), Position: int(r.GetPosition()), Granted: r.GetGranted()}, nil
}

// aclAdmin prepares a call to the admin service of the session's gateway.
func (c *Client) aclAdmin(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.AclAdminClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewAclAdminClient(c.conns[c.connIndex()])
}
