package gateway

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The agent lifecycle and discovery calls: types, an agent's stored
// configuration and state, deactivation, reminders. Each resolves the agent's
// address for the caller; the client grain (clientgrain.go) checks the
// permission each needs before the handler runs.

// resolve is the canonical address of agent for the unary caller.
func resolve(ctx context.Context, agent string) (grain.Address, error) {
	p, err := unaryPrincipal(ctx)
	if err != nil {
		return grain.Address{}, err
	}
	return grain.Resolve(agent, p)
}

// configs is the silo's store of agent configurations, if it keeps them.
func (g *Gateway) configs() (grain.ConfigStore, error) {
	if cs := g.rt.Config().Configs; cs != nil {
		return cs, nil
	}
	return nil, errs.New(codes.Unavailable, "agent configurations are not kept on silo %s", g.cfg.Silo)
}

// stateStore is the silo's store of agent state, if it has one.
func (g *Gateway) stateStore() (grain.StateStore, error) {
	if st := g.rt.Config().State; st != nil {
		return st, nil
	}
	return nil, errs.New(codes.FailedPrecondition, "silo %s keeps no agent state (no state store)", g.cfg.Silo)
}

// Stored listings' pages: by default, and at most.
const (
	defaultStoredPage = 1000
	maxStoredPage     = 10000
)

// listStored lists the agents of a type and owner that have state, a
// page at a time (ListAgentsRequest.stored).
func (g *Gateway) listStored(ctx context.Context, req *agentsilov1.ListAgentsRequest) (*agentsilov1.ListAgentsResponse, error) {
	typ, owner, after := req.GetType(), req.GetOwner(), req.GetAfter()
	switch {
	case !grain.ValidType(typ):
		return nil, errs.New(codes.InvalidArgument, "list the agents with state: type %q: want a type name", protocol.Clip(typ))
	case !grain.ValidName(owner):
		return nil, errs.New(codes.InvalidArgument, "list the agents with state: owner %q: want an owner", protocol.Clip(owner))
	case after != "" && !grain.ValidName(after):
		return nil, errs.New(codes.InvalidArgument, "list the agents with state: after %q: want an alias", protocol.Clip(after))
	case req.GetLimit() > maxStoredPage:
		return nil, errs.New(codes.InvalidArgument, "list the agents with state: limit %d is over %d", req.GetLimit(), maxStoredPage)
	}
	st, err := g.stateStore()
	if err != nil {
		return nil, err
	}
	l, ok := st.(grain.StateLister)
	if !ok {
		return nil, errs.New(codes.Unimplemented, "silo %s: its state store (%T) does not list agents", g.cfg.Silo, st)
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultStoredPage
	}
	addrs, err := l.List(ctx, typ, owner, after, limit)
	if err != nil {
		return nil, err
	}
	resp := &agentsilov1.ListAgentsResponse{Agents: make([]*agentsilov1.ActivationInfo, len(addrs))}
	for i, a := range addrs {
		resp.Agents[i] = &agentsilov1.ActivationInfo{Address: a.String()}
	}
	return resp, nil
}

// ListTypes implements agentsilov1.GatewayServer: the types of every silo
// (a silo of a rolling upgrade may host types the others do not yet).
func (g *Gateway) ListTypes(ctx context.Context, req *agentsilov1.ListTypesRequest) (*agentsilov1.ListTypesResponse, error) {
	if _, err := unaryPrincipal(ctx); err != nil {
		return nil, err
	}
	var types []*agentsilov1.AgentType
	if g.cfg.Cluster != nil {
		var err error
		if types, err = g.cfg.Cluster.Types(ctx); err != nil && len(types) == 0 {
			return nil, err
		}
	} else {
		for _, t := range g.rt.Registry().Types() {
			types = append(types, TypeProto(t))
		}
	}
	out := &agentsilov1.ListTypesResponse{}
	for _, t := range types {
		if tag := req.GetSkillTag(); tag == "" || hasTag(t, tag) {
			out.Types = append(out.Types, t)
		}
	}
	return out, nil
}

// GetConfig implements agentsilov1.GatewayServer.
func (g *Gateway) GetConfig(ctx context.Context, req *agentsilov1.GetConfigRequest) (*agentsilov1.GetConfigResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	cs, err := g.configs()
	if err != nil {
		return nil, err
	}
	cfg, err := cs.Get(ctx, a)
	if err != nil {
		return nil, err
	}
	if cfg != nil && !g.mayConfigure(ctx, a) {
		cfg = grain.RedactConfig(cfg)
	}
	return &agentsilov1.GetConfigResponse{Address: a.String(), Config: cfg, Found: cfg != nil}, nil
}

// mayConfigure reports whether the unary caller may Configure a, or
// administer the ACL: who may read an agent's secret configuration
// values (grain.SecretConfigKey) back.
func (g *Gateway) mayConfigure(ctx context.Context, a grain.Address) bool {
	if g.cfg.ACL == nil {
		return true
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return false
	}
	return g.cfg.ACL.Allowed(c, a.Owner, a.Alias, acl.Configure) || g.cfg.ACL.IsAdmin(c)
}

// DeleteConfig implements agentsilov1.GatewayServer.
func (g *Gateway) DeleteConfig(ctx context.Context, req *agentsilov1.DeleteConfigRequest) (*agentsilov1.DeleteConfigResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	cs, err := g.configs()
	if err != nil {
		return nil, err
	}
	if err := cs.Delete(ctx, a); err != nil {
		return nil, err
	}
	return &agentsilov1.DeleteConfigResponse{Address: a.String()}, nil
}

// Deactivate implements agentsilov1.GatewayServer.
func (g *Gateway) Deactivate(ctx context.Context, req *agentsilov1.DeactivateRequest) (*agentsilov1.DeactivateResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	if a.Type == grain.SessionType {
		return nil, errs.New(codes.InvalidArgument, "%s is a client session, not an agent", a)
	}
	var active bool
	if g.cfg.Cluster != nil {
		active, err = g.cfg.Cluster.Deactivate(ctx, a.String())
	} else {
		active, err = g.rt.Deactivate(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	return &agentsilov1.DeactivateResponse{Address: a.String(), WasActive: &active}, nil
}

// UnregisterReminder implements agentsilov1.GatewayServer.
func (g *Gateway) UnregisterReminder(ctx context.Context, req *agentsilov1.UnregisterReminderRequest) (*agentsilov1.UnregisterReminderResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	svc := g.rt.Config().Reminders
	if svc == nil {
		return nil, errs.New(codes.Unavailable, "reminders are not configured on silo %s", g.cfg.Silo)
	}
	if err := svc.Unregister(ctx, a, req.GetName()); err != nil {
		return nil, err
	}
	return &agentsilov1.UnregisterReminderResponse{Address: a.String()}, nil
}

// GetState implements agentsilov1.GatewayServer.
func (g *Gateway) GetState(ctx context.Context, req *agentsilov1.GetStateRequest) (*agentsilov1.GetStateResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	st, err := g.stateStore()
	if err != nil {
		return nil, err
	}
	data, etag, err := st.Load(ctx, a)
	if err != nil {
		return nil, err
	}
	return &agentsilov1.GetStateResponse{Address: a.String(), Data: data, Etag: etag, Found: etag != ""}, nil
}

// DeleteState implements agentsilov1.GatewayServer. Without an etag it
// deletes whatever version is stored.
func (g *Gateway) DeleteState(ctx context.Context, req *agentsilov1.DeleteStateRequest) (*agentsilov1.DeleteStateResponse, error) {
	a, err := resolve(ctx, req.GetAgent())
	if err != nil {
		return nil, err
	}
	st, err := g.stateStore()
	if err != nil {
		return nil, err
	}
	etag := req.GetEtag()
	if etag == "" {
		if _, etag, err = st.Load(ctx, a); err != nil {
			return nil, err
		}
		if etag == "" {
			return &agentsilov1.DeleteStateResponse{Address: a.String()}, nil
		}
	}
	if err := st.Delete(ctx, a, etag); err != nil {
		return nil, err
	}
	if l := g.cfg.Audit; l.Enabled() {
		r := audit.Record{Key: "state/" + a.String() + "/" + etag, Kind: audit.KindStateDelete, Agent: a.String(), Skill: "DeleteState", Trigger: "admin"}
		if c, err := unaryCaller(ctx); err == nil {
			r.Principal, r.OnBehalfOf = c.Principal, []string{c.Principal}
		}
		if err := l.Append(ctx, r); err != nil {
			g.logger.Error("audit: a deleted state is not recorded", "agent", a, "err", err)
		}
	}
	return &agentsilov1.DeleteStateResponse{Address: a.String()}, nil
}

// ownedBy keeps the activations of owner (case-insensitive, as the ACL
// compares owners); empty keeps all.
func ownedBy(owner string, in []*agentsilov1.ActivationInfo) []*agentsilov1.ActivationInfo {
	if owner == "" {
		return in
	}
	out := in[:0]
	for _, ai := range in {
		if a, err := grain.ParseAddress(ai.GetAddress()); err == nil && strings.EqualFold(a.Owner, owner) {
			out = append(out, ai)
		}
	}
	clear(in[len(out):])
	return out
}

// hasTag reports whether a skill of t carries tag, compared without regard
// to case.
func hasTag(t *agentsilov1.AgentType, tag string) bool {
	for _, sk := range t.GetSkills() {
		for _, x := range sk.GetTags() {
			if strings.EqualFold(x, tag) {
				return true
			}
		}
	}
	return false
}
