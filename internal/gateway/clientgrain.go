package gateway

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The client grain is where a client's calls enter the cluster, and where
// the ACL is enforced (agent-to-agent calls inside the cluster are trusted
// and not checked). A session is one: it holds its client's authenticated
// caller (session.caller) and address, and every call it makes passes
// authorizeMessage before the runtime sees it. Unary calls get the same
// checks in unaryACL, with the caller their authentication gave. A check
// resolves a relative address against the caller's principal and needs:
//
//	Ask, Send, Event         Message on the target
//	CreateAgent              Configure, on another owner's agent
//	ListReminders, GetConfig, GetState           Read on the agent (GetConfig
//	                         shows secret values only with Configure, or to
//	                         operators: mayConfigure)
//	DeleteConfig, DeleteState, Deactivate,
//	UnregisterReminder                           Configure on the agent
//	ListAgents               Read: the listing keeps what the caller may
//	                         read (operators, who may administer the ACL,
//	                         see every activation)
//	ListTypes, ListMembers   any authenticated caller
//
// The sender (from) is always the client grain's own address: what a client
// puts there is overwritten (stamp).

// unaryCaller returns the caller of a unary call, as authentication put it
// in ctx; without one (a handler called directly), the declared principal.
func unaryCaller(ctx context.Context) (*acl.Caller, error) {
	if c := acl.CallerFrom(ctx); c != nil {
		return c, nil
	}
	return auth.CallerFor(nil, auth.DeclaredPrincipal(ctx))
}

// authorizeMessage resolves m.To for caller c (a relative address becomes
// canonical) and checks that c may message it: a token's caller must hold
// the scopes the skill requires (its message type), and c the ACL's
// Message.
func (g *Gateway) authorizeMessage(c *acl.Caller, m *agentsilov1.AgentMessage) error {
	a, err := grain.Resolve(m.To, c.Principal)
	if err != nil {
		return err
	}
	if strings.Count(m.To, ":") == 1 {
		m.To = a.String()
	}
	if sc := c.MissingScope(g.rt.Registry().RequiredScopes(a.Type, m.GetMessageType())); sc != "" {
		return acl.ScopeDenied(c, sc, m.GetMessageType(), m.To)
	}
	return g.authorize(c, a, acl.Message)
}

// authorize checks that c holds need on a; with no ACL configured, every
// call is allowed.
func (g *Gateway) authorize(c *acl.Caller, a grain.Address, need acl.Permission) error {
	if g.cfg.ACL == nil {
		return nil
	}
	return g.cfg.ACL.Authorize(c, a.Type, a.Owner, a.Alias, need)
}

// unaryACL is the client grain of unary calls: it checks each call of the
// Gateway service as the table above says. Errors in the request itself are
// left for the handler to report.
func (g *Gateway) unaryACL(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, "/"+agentsilov1.Gateway_ServiceDesc.ServiceName+"/") {
		return h(ctx, req)
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	var check error
	switch r := req.(type) {
	case *agentsilov1.AskRequest:
		if m := r.GetMessage(); m != nil {
			check = g.authorizeMessage(c, m)
		}
	case *agentsilov1.SendRequest:
		if m := r.GetMessage(); m != nil {
			check = g.authorizeMessage(c, m)
		}
	case *agentsilov1.CreateAgentRequest:
		if a, err := grain.Resolve(r.GetAddress(), c.Principal); err == nil {
			check = g.authorize(c, a, acl.Configure)
		}
	case *agentsilov1.ListRemindersRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Read)
	case *agentsilov1.GetConfigRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Read)
	case *agentsilov1.GetStateRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Read)
	case *agentsilov1.DeleteConfigRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Configure)
	case *agentsilov1.DeleteStateRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Configure)
	case *agentsilov1.DeactivateRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Configure)
	case *agentsilov1.UnregisterReminderRequest:
		check = g.authorizeAgent(c, r.GetAgent(), acl.Configure)
	case *agentsilov1.ListAgentsRequest:
		resp, err := h(ctx, req)
		if l, ok := resp.(*agentsilov1.ListAgentsResponse); ok && err == nil {
			l.Agents = g.readable(c, l.Agents)
		}
		return resp, err
	}
	if check != nil {
		return nil, check
	}
	return h(ctx, req)
}

// authorizeAgent checks that c holds need on agent (an address, resolved
// for c); a malformed address is left for the handler to report.
func (g *Gateway) authorizeAgent(c *acl.Caller, agent string, need acl.Permission) error {
	a, err := grain.Resolve(agent, c.Principal)
	if err != nil {
		return nil
	}
	return g.authorize(c, a, need)
}

// readable keeps the activations that c may read. Operators (those who may
// administer the ACL: Admin on system:acl, or group admins) read them all.
// Read on system:* does not make an operator: the seed rule gives it to
// everyone.
func (g *Gateway) readable(c *acl.Caller, in []*agentsilov1.ActivationInfo) []*agentsilov1.ActivationInfo {
	if g.cfg.ACL == nil || g.cfg.ACL.IsAdmin(c) {
		return in
	}
	out := in[:0]
	for _, ai := range in {
		a, err := grain.ParseAddress(ai.GetAddress())
		if err == nil && g.cfg.ACL.Allowed(c, a.Owner, a.Alias, acl.Read) {
			out = append(out, ai)
		}
	}
	clear(in[len(out):])
	return out
}
