package directory

import (
	"context"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/grain"
)

// Access: the directory is the pseudo-agent system:directory to the ACL.
// Reading it (search, list, get) needs Read on it; adding and removing
// entries needs Admin on it. ACL administrators (Admin on system:acl, or
// group admins) may do both.
const (
	// ACLOwner and ACLAgent name the pseudo-agent system:directory.
	ACLOwner = "system"
	ACLAgent = "directory"
	// aclType is the type the ACL's errors name.
	aclType = "Directory"
)

// Authorize returns nil if c holds need on system:directory (or
// administers the ACL), else PermissionDenied. A nil Authority allows
// everything.
func Authorize(a *acl.Authority, c *acl.Caller, need acl.Permission) error {
	if a == nil || a.Allowed(c, ACLOwner, ACLAgent, need) {
		return nil
	}
	if p, _ := a.Policy(); p != nil && p.CheckAdmin(c).Allowed {
		return nil
	}
	return a.Authorize(c, aclType, ACLOwner, ACLAgent, need)
}

// Service is the directory as agents reach it (grain.DirectoryService):
// each call checked as its principal (Read on system:directory).
type Service struct {
	Dir *Directory
	ACL *acl.Authority // nil: no check
}

func (s Service) check(principal string) error {
	return Authorize(s.ACL, &acl.Caller{Principal: principal}, acl.Read)
}

// Search implements grain.DirectoryService.
func (s Service) Search(ctx context.Context, principal string, q grain.DirectoryQuery) ([]grain.DirectoryHit, error) {
	if err := s.check(principal); err != nil {
		return nil, err
	}
	return s.Dir.Search(ctx, q)
}

// List implements grain.DirectoryService.
func (s Service) List(ctx context.Context, principal string, q grain.DirectoryQuery) ([]grain.DirectoryEntry, error) {
	if err := s.check(principal); err != nil {
		return nil, err
	}
	return s.Dir.List(ctx, q)
}

// Get implements grain.DirectoryService.
func (s Service) Get(ctx context.Context, principal, name string) (grain.DirectoryEntry, error) {
	if err := s.check(principal); err != nil {
		return grain.DirectoryEntry{}, err
	}
	return s.Dir.Get(ctx, name)
}
