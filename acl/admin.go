package acl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// AdminServer is the ACL admin gRPC service (agentsilov1.AclAdmin) of an
// Authority. The gateway serves it; every method needs the caller that the
// gateway's authentication put in the context (WithCaller) to hold Admin on
// system:acl or belong to group admins. Safe for concurrent use.
type AdminServer struct {
	agentsilov1.UnimplementedAclAdminServer
	a *Authority
}

// NewAdminServer returns the admin service of a.
func NewAdminServer(a *Authority) *AdminServer { return &AdminServer{a: a} }

func (s *AdminServer) admin(ctx context.Context) error {
	c := CallerFrom(ctx)
	if c == nil {
		return errs.New(codes.Unauthenticated, "acl: no authenticated caller")
	}
	return s.a.AuthorizeAdmin(c)
}

// record records a change made through the service, at revision rev
// (the audit's key: one record per change).
func (s *AdminServer) record(ctx context.Context, what, detail string, rev int64) {
	l := s.a.cfg.Audit
	if !l.Enabled() {
		return
	}
	r := audit.Record{Key: "acl/" + strconv.FormatInt(rev, 10), Kind: audit.KindACL, Agent: AdminOwner + ":" + AdminAgent, Skill: what, Trigger: "admin", Detail: detail, Correlation: strconv.FormatInt(rev, 10)}
	if c := CallerFrom(ctx); c != nil {
		r.Principal, r.OnBehalfOf = c.Principal, []string{c.Principal}
	}
	if err := l.Append(ctx, r); err != nil {
		s.a.logger.Error("audit: an ACL change is not recorded", "change", what, "revision", rev, "err", err)
	}
}

func ruleText(r Rule) string {
	return fmt.Sprintf("rule %d: owner %s agent %s caller %s permission %s", r.ID, r.OwnerPattern, r.AgentPattern, r.CallerPattern, r.Permission)
}

// ruleFromProto checks and converts r.
func ruleFromProto(r *agentsilov1.AclRule) (Rule, error) {
	if r == nil {
		return Rule{}, errs.New(codes.InvalidArgument, "missing rule")
	}
	p, err := ParsePermission(r.GetPermission())
	if err != nil {
		return Rule{}, err // InvalidArgument
	}
	out := Rule{ID: r.GetId(), OwnerPattern: r.GetOwnerPattern(), AgentPattern: r.GetAgentPattern(), CallerPattern: r.GetCallerPattern(), Permission: p}
	if err := out.Validate(); err != nil {
		return Rule{}, err // InvalidArgument
	}
	return out, nil
}

// RuleProto converts r to its wire form.
func RuleProto(r Rule) *agentsilov1.AclRule {
	return &agentsilov1.AclRule{Id: r.ID, OwnerPattern: r.OwnerPattern, AgentPattern: r.AgentPattern, CallerPattern: r.CallerPattern, Permission: r.Permission.String()}
}

// ListRules implements agentsilov1.AclAdminServer.
func (s *AdminServer) ListRules(ctx context.Context, _ *agentsilov1.ListRulesRequest) (*agentsilov1.ListRulesResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	d, rev, err := s.a.cfg.Store.Get(ctx)
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.ListRulesResponse{Revision: rev}
	for _, r := range d.Rules {
		out.Rules = append(out.Rules, RuleProto(r))
	}
	if len(d.Rules) == 0 {
		out.SeedRule = RuleProto(SeedRule)
	}
	return out, nil
}

// AddRule implements agentsilov1.AclAdminServer.
func (s *AdminServer) AddRule(ctx context.Context, req *agentsilov1.AddRuleRequest) (*agentsilov1.AddRuleResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	r, err := ruleFromProto(req.GetRule())
	if err != nil {
		return nil, err
	}
	pos := int(req.GetPosition())
	var added Rule
	var at int // where it went, 0-based
	// f may run more than once (Update retries after concurrent changes):
	// it keeps what it was given and sets only added and at.
	_, rev, err := s.a.Update(ctx, req.GetRevision(), func(d *Document) error {
		if pos < 0 || pos > len(d.Rules)+1 {
			return errs.New(codes.InvalidArgument, "position %d: want 1 to %d, or 0 for the end", pos, len(d.Rules)+1)
		}
		at = pos - 1
		if pos == 0 {
			at = len(d.Rules)
		}
		added = r
		added.ID = d.NextID
		d.NextID++
		d.Rules = slices.Insert(d.Rules, at, added)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.record(ctx, "add_rule", ruleText(added), rev)
	return &agentsilov1.AddRuleResponse{Rule: RuleProto(added), Position: int32(at + 1), Revision: rev}, nil
}

// UpdateRule implements agentsilov1.AclAdminServer.
func (s *AdminServer) UpdateRule(ctx context.Context, req *agentsilov1.UpdateRuleRequest) (*agentsilov1.UpdateRuleResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	r, err := ruleFromProto(req.GetRule())
	if err != nil {
		return nil, err
	}
	_, rev, err := s.a.Update(ctx, req.GetRevision(), func(d *Document) error {
		i := slices.IndexFunc(d.Rules, func(x Rule) bool { return x.ID == r.ID })
		if i < 0 {
			return errs.New(codes.NotFound, "no rule with id %d", r.ID)
		}
		d.Rules[i] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.record(ctx, "update_rule", ruleText(r), rev)
	return &agentsilov1.UpdateRuleResponse{Rule: RuleProto(r), Revision: rev}, nil
}

// RemoveRule implements agentsilov1.AclAdminServer.
func (s *AdminServer) RemoveRule(ctx context.Context, req *agentsilov1.RemoveRuleRequest) (*agentsilov1.RemoveRuleResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	_, rev, err := s.a.Update(ctx, req.GetRevision(), func(d *Document) error {
		i := slices.IndexFunc(d.Rules, func(x Rule) bool { return x.ID == req.GetId() })
		if i < 0 {
			return errs.New(codes.NotFound, "no rule with id %d", req.GetId())
		}
		d.Rules = slices.Delete(d.Rules, i, i+1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.record(ctx, "remove_rule", "rule "+strconv.FormatUint(req.GetId(), 10), rev)
	return &agentsilov1.RemoveRuleResponse{Revision: rev}, nil
}

// ListGroups implements agentsilov1.AclAdminServer.
func (s *AdminServer) ListGroups(ctx context.Context, _ *agentsilov1.ListGroupsRequest) (*agentsilov1.ListGroupsResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	d, rev, err := s.a.cfg.Store.Get(ctx)
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.ListGroupsResponse{Revision: rev}
	for _, g := range slices.Sorted(maps.Keys(d.Groups)) {
		out.Groups = append(out.Groups, &agentsilov1.AclGroup{Name: g, Members: d.Groups[g]})
	}
	return out, nil
}

// SetGroup implements agentsilov1.AclAdminServer.
func (s *AdminServer) SetGroup(ctx context.Context, req *agentsilov1.SetGroupRequest) (*agentsilov1.SetGroupResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	g := req.GetGroup()
	if !validName(g.GetName()) {
		return nil, errs.New(codes.InvalidArgument, "group %q: bad name; want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(g.GetName()))
	}
	_, rev, err := s.a.Update(ctx, req.GetRevision(), func(d *Document) error {
		for name := range d.Groups {
			if strings.EqualFold(name, g.GetName()) {
				delete(d.Groups, name)
			}
		}
		if len(g.GetMembers()) == 0 {
			return nil
		}
		if d.Groups == nil {
			d.Groups = make(map[string][]string)
		}
		ms := slices.Clone(g.GetMembers())
		slices.Sort(ms)
		d.Groups[g.GetName()] = slices.Compact(ms)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.record(ctx, "set_group", "group "+g.GetName()+": "+strings.Join(g.GetMembers(), ","), rev)
	return &agentsilov1.SetGroupResponse{Revision: rev}, nil
}

// Check implements agentsilov1.AclAdminServer.
func (s *AdminServer) Check(ctx context.Context, req *agentsilov1.CheckRequest) (*agentsilov1.CheckResponse, error) {
	if err := s.admin(ctx); err != nil {
		return nil, err
	}
	if !validName(req.GetCaller()) {
		return nil, errs.New(codes.InvalidArgument, "caller %q: want a principal", clip(req.GetCaller()))
	}
	need, err := ParsePermission(req.GetPermission())
	if err != nil || need == None {
		return nil, errs.New(codes.InvalidArgument, "permission %q: want one or more of Message, Configure, Read, Admin, Approve, Audit", clip(req.GetPermission()))
	}
	owner, alias, err := ParseTarget(req.GetAgent())
	if err != nil {
		return nil, err
	}
	p, _ := s.a.Policy()
	if p == nil {
		return nil, errs.New(codes.Unavailable, "acl: the access control list is not loaded yet; retry")
	}
	c := &Caller{Principal: req.GetCaller(), Groups: req.GetGroups()}
	var d Decision
	if owner == AdminOwner && alias == AdminAgent && need == Admin {
		d = p.CheckAdmin(c)
	} else {
		d = p.Check(c, owner, alias, need)
	}
	out := &agentsilov1.CheckResponse{Allowed: d.Allowed, Reason: d.Reason.String(), Position: int32(d.Position), Granted: d.Granted.String()}
	if d.Reason == RuleMatched {
		out.Rule = RuleProto(d.Rule)
	}
	return out, nil
}

// ParseTarget reads what a check is about: an address `Type:owner:alias` or
// a handle `owner:alias`, and returns its owner and alias.
func ParseTarget(s string) (owner, alias string, err error) {
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		owner, alias = parts[0], parts[1]
	case 3:
		owner, alias = parts[1], parts[2]
	default:
		return "", "", errs.New(codes.InvalidArgument, "agent %q: want Type:owner:alias or owner:alias", clip(s))
	}
	if !validName(owner) || !validName(alias) {
		return "", "", errs.New(codes.InvalidArgument, "agent %q: bad owner or alias; want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", clip(s))
	}
	return owner, alias, nil
}
