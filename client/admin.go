package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Admin is the cluster as a whole: its silos (Members), the agent types
// they host (Types), and agent types declared without code (ApplyType,
// DeleteType, DeclaredTypes). Reach it with Client.Admin.
//
// A declared type is a model agent whose definition (an llm.Definition,
// in YAML or JSON) the cluster stores and every silo serves at once, with
// no restart. ApplyType and DeleteType need Admin on the pseudo-agent
// system:types (or administration of the ACL: Admin on system:acl, or
// group admins); DeclaredTypes needs Read on it. Types lists declared
// types among the others, with Declared set.
type Admin struct{ c *Client }

// Admin returns the client's cluster calls.
func (c *Client) Admin() Admin { return Admin{c} }

// Members lists the silos of the cluster as the gateway sees them.
func (a Admin) Members(ctx context.Context) ([]Member, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.ListMembers(ctx, &agentsilov1.ListMembersRequest{})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return members(r.GetMembers()), nil
}

// Types lists the agent types the cluster's silos host, by name, with
// their descriptions and skills; with a tag, only the types having a skill
// with that tag (compared without regard to case).
func (a Admin) Types(ctx context.Context, skillTag string) ([]AgentType, error) {
	ctx, cancel, gw := a.c.unary(ctx)
	defer cancel()
	r, err := gw.ListTypes(ctx, &agentsilov1.ListTypesRequest{SkillTag: skillTag})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return agentTypes(r.GetTypes()), nil
}

// DeclaredType is a stored definition.
type DeclaredType struct {
	// Name is the type's name.
	Name string
	// Definition is the definition as stored (JSON).
	Definition string
	// Revision is the etcd revision that stored it (0 for a dry run's).
	Revision int64
}

// Applied is what Admin.ApplyType did.
type Applied struct {
	// Type is the definition as stored (or, with a dry run, as it would
	// be).
	Type DeclaredType
	// Created is true if no type of that name was declared before;
	// Unchanged if the same definition was stored already (nothing was
	// written).
	Created, Unchanged bool
	// Unconfirmed names the silos that did not confirm serving the
	// definition before the call's deadline (empty: every silo serves it).
	Unconfirmed []string
}

// typeAdmin prepares a call to the TypeAdmin service of the session's
// gateway.
func (c *Client) typeAdmin(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.TypeAdminClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewTypeAdminClient(c.conns[c.connIndex()])
}

// ApplyType validates a definition (YAML or JSON) and stores it, creating
// or replacing its type; it returns once every silo serves it (see
// Applied.Unconfirmed). With DryRun it only validates, storing nothing. A
// definition that does not validate is InvalidArgument naming the field;
// a type registered in code is FailedPrecondition. Options: DryRun.
func (a Admin) ApplyType(ctx context.Context, definition []byte, opts ...CallOption) (Applied, error) {
	o, err := callOpts("apply type", opts, optDryRun)
	if err != nil {
		return Applied{}, err
	}
	ctx, cancel, ta := a.c.typeAdmin(ctx)
	defer cancel()
	r, err := ta.ApplyType(ctx, &agentsilov1.ApplyTypeRequest{Definition: definition, DryRun: o.dryRun})
	if err != nil {
		return Applied{}, errs.FromStatus(err)
	}
	return Applied{Type: declaredType(r.GetType()), Created: r.GetCreated(), Unchanged: r.GetUnchanged(), Unconfirmed: r.GetUnconfirmed()}, nil
}

// DeleteType removes a declared type and returns the silos that did not
// confirm removing it before the call's deadline. NotFound if no type of
// that name is declared; FailedPrecondition for a type registered in code.
func (a Admin) DeleteType(ctx context.Context, name string) (unconfirmed []string, err error) {
	ctx, cancel, ta := a.c.typeAdmin(ctx)
	defer cancel()
	r, err := ta.DeleteType(ctx, &agentsilov1.DeleteTypeRequest{Name: name})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return r.GetUnconfirmed(), nil
}

// DeclaredTypes returns the declared types, by name, with their
// definitions.
func (a Admin) DeclaredTypes(ctx context.Context) ([]DeclaredType, error) {
	ctx, cancel, ta := a.c.typeAdmin(ctx)
	defer cancel()
	r, err := ta.ListDeclaredTypes(ctx, &agentsilov1.ListDeclaredTypesRequest{})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	out := make([]DeclaredType, len(r.GetTypes()))
	for i, t := range r.GetTypes() {
		out[i] = declaredType(t)
	}
	return out, nil
}

func declaredType(t *agentsilov1.DeclaredType) DeclaredType {
	return DeclaredType{Name: t.GetName(), Definition: t.GetDefinition(), Revision: t.GetRevision()}
}
