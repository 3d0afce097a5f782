package acl

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

type callerKey struct{}

// WithCaller returns ctx carrying c, the caller the gateway authenticated.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, or nil.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// Denied is the error of a check that failed: PermissionDenied, naming the
// permission missing and never the rules.
func Denied(c *Caller, need Permission, target string) error {
	return errs.New(codes.PermissionDenied, "%s may not do this on %s: permission %s missing", c.Principal, target, need)
}

// ScopeDenied is the error of a call whose token lacks a scope the skill
// requires: PermissionDenied, naming the scope.
func ScopeDenied(c *Caller, scope, skill, target string) error {
	return errs.New(codes.PermissionDenied, "%s may not call skill %s of %s: the token lacks scope %q", c.Principal, skill, target, scope)
}
