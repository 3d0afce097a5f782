package grain

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Every message carries the principal that started its call chain, in
// OnBehalfOf: the gateway sets it to the client's principal; a message an
// agent sends while handling one inherits it (the runtime sets it, whatever
// the agent put there); a timer's tick, a reminder's tick and a message an
// agent sends outside any turn are on behalf of the agent's owner.
//
// A message an agent sends to an agent of another owner is checked with
// Config.Authorizer against that principal before it is delivered: an agent
// cannot lend its own rights to whoever made it call (the confused deputy).
// Messages between agents of one owner are not checked.

// Authorizer decides whether an agent's message may reach another owner's
// agent. The runtime calls it on the sending agent's side, from any
// goroutine, concurrently, before the message is queued or forwarded:
// for every message an agent sends (Host.Ask, Send, Event, and each target
// of Broadcast) to an address whose owner is not the sender's. package
// cluster implements it with the ACL.
type Authorizer interface {
	// AuthorizeMessage returns nil if principal may message the agent at
	// to, else an error with its code (PermissionDenied), which the
	// sending agent gets.
	AuthorizeMessage(ctx context.Context, principal string, to Address) error
}

// PermissionAuthorizer is an Authorizer that also checks the ACL's other
// permissions, for Host.Authorize: package cluster's does, with the
// ACL.
type PermissionAuthorizer interface {
	// AuthorizePermission returns nil if principal holds permission (an
	// ACL permission's name, such as "Approve") on the agent at to, else
	// an error with its code (PermissionDenied; InvalidArgument for a
	// permission that is not one).
	AuthorizePermission(ctx context.Context, principal string, to Address, permission string) error
}

// Authorize implements Host.Authorize.
func (a *activation) Authorize(ctx context.Context, principal, permission string) error {
	if principal != "" && principal == a.owner() {
		return nil
	}
	if pa, ok := a.rt.cfg.Authorizer.(PermissionAuthorizer); ok {
		return pa.AuthorizePermission(ctx, principal, a.address(), permission)
	}
	return errs.New(codes.PermissionDenied, "%s: %s does not hold %s on it: this silo has no ACL, and only the agent's owner, %s, does", a.address(), principal, permission, a.owner())
}

// principal returns the principal a message this activation sends from ctx
// is on behalf of: that of the message its turn handles, or, outside a turn
// (or for a message that names none), the agent's owner or the owner of the
// handled message's sender.
func (a *activation) principal(ctx context.Context) string {
	t := turnFrom(ctx)
	if t == nil || t.act != a || t.msg == nil {
		return a.owner()
	}
	if p := t.msg.OnBehalfOf; p != "" {
		return p
	}
	if p := ownerOf(t.msg.From); p != "" {
		return p
	}
	return a.owner()
}

// turnMessage returns the message the turn of ctx handles, nil outside this
// activation's turns.
func (a *activation) turnMessage(ctx context.Context) *Message {
	if t := turnFrom(ctx); t != nil && t.act == a {
		return t.msg
	}
	return nil
}

// onBehalf stamps msg, which this activation sends from ctx to msg.To, with
// the principal it is on behalf of and its content label (capLabel), and checks that the principal may
// message msg.To if its owner is another. A malformed msg.To is left for the
// runtime to refuse.
func (a *activation) onBehalf(ctx context.Context, msg *Message) error {
	p := a.principal(ctx)
	msg.OnBehalfOf = p
	capLabel(msg, a.turnMessage(ctx))
	// Only the runtime delivers topics: an agent's message is none (a
	// batch of deliveries it made up would carry other principals).
	msg.Topic, msg.Subscription = "", ""
	az := a.rt.cfg.Authorizer
	if az == nil {
		return nil
	}
	owner := ownerOf(msg.To) // "" for a relative address: the sender's owner
	if owner == "" || owner == a.owner() || owner == p {
		return nil
	}
	to, err := Resolve(msg.To, a.owner())
	if err != nil {
		return nil
	}
	return az.AuthorizeMessage(ctx, p, to)
}
