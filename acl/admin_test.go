package acl_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

func as(ctx context.Context, principal string, groups ...string) context.Context {
	return acl.WithCaller(ctx, &acl.Caller{Principal: principal, Groups: groups})
}

func TestAdminServer(t *testing.T) {
	a := startAuthority(t, acl.NewMemStore(), nil)
	s := acl.NewAdminServer(a)
	ctx := t.Context()
	root := as(ctx, "root", "admins")

	// Without a caller: Unauthenticated; without Admin: PermissionDenied.
	if _, err := s.ListRules(ctx, &agentsilov1.ListRulesRequest{}); errs.Code(err) != codes.Unauthenticated {
		t.Fatalf("no caller: %v", err)
	}
	if _, err := s.ListRules(as(ctx, "alice"), &agentsilov1.ListRulesRequest{}); errs.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice: %v", err)
	}
	// No rules: the seed rule is reported, and Check explains it.
	l, err := s.ListRules(root, &agentsilov1.ListRulesRequest{})
	if err != nil || len(l.Rules) != 0 || l.SeedRule.GetOwnerPattern() != "system" || l.SeedRule.GetPermission() != "Message,Read" {
		t.Fatalf("ListRules: %v, %v", l, err)
	}
	c, err := s.Check(root, &agentsilov1.CheckRequest{Caller: "alice", Agent: "Weather:system:w", Permission: "Read"})
	if err != nil || !c.Allowed || c.Reason != "rule" || c.Position != 0 || c.Rule.GetOwnerPattern() != "system" {
		t.Fatalf("Check under the seed rule: %v, %v", c, err)
	}
	c, err = s.Check(root, &agentsilov1.CheckRequest{Caller: "alice", Agent: "alice:w", Permission: "Admin"})
	if err != nil || !c.Allowed || c.Reason != "own agent" || c.Granted != "All" {
		t.Fatalf("Check of an own agent: %v, %v", c, err)
	}
	for _, bad := range []*agentsilov1.CheckRequest{
		{Caller: "alice", Agent: "w", Permission: "Read"},
		{Caller: "alice", Agent: "a:b:c:d", Permission: "Read"},
		{Caller: "a b", Agent: "a:b", Permission: "Read"},
		{Caller: "alice", Agent: "a:b", Permission: "None"},
		{Caller: "alice", Agent: "a:b", Permission: "Write"},
	} {
		if _, err := s.Check(root, bad); errs.Code(err) != codes.InvalidArgument {
			t.Errorf("Check(%v) = %v, want InvalidArgument", bad, err)
		}
	}

	// Concurrent adds at revision 0 all land, with distinct ids.
	var wg sync.WaitGroup
	ids := make(chan uint64, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.AddRule(root, &agentsilov1.AddRuleRequest{Rule: &agentsilov1.AclRule{OwnerPattern: "o" + string(rune('a'+i)), AgentPattern: "*", CallerPattern: "*", Permission: "Read"}})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- r.Rule.Id
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[uint64]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 10 {
		t.Fatalf("%d distinct ids from 10 adds", len(seen))
	}
	// Add at a position, update, remove.
	added, err := s.AddRule(root, &agentsilov1.AddRuleRequest{Rule: &agentsilov1.AclRule{OwnerPattern: "bob", AgentPattern: "x*", CallerPattern: "group:friends", Permission: "message"}, Position: 1})
	if err != nil || added.Position != 1 || added.Rule.Permission != "Message" {
		t.Fatalf("AddRule at 1: %v, %v", added, err)
	}
	if _, err := s.AddRule(root, &agentsilov1.AddRuleRequest{Rule: &agentsilov1.AclRule{OwnerPattern: "bob", AgentPattern: "*", CallerPattern: "*", Permission: "Read"}, Position: 99}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("AddRule at 99: %v", err)
	}
	if _, err := s.AddRule(root, &agentsilov1.AddRuleRequest{Rule: &agentsilov1.AclRule{OwnerPattern: "b*b", AgentPattern: "*", CallerPattern: "*", Permission: "Read"}}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("AddRule with a bad pattern: %v", err)
	}
	if _, err := s.UpdateRule(root, &agentsilov1.UpdateRuleRequest{Rule: &agentsilov1.AclRule{Id: added.Rule.Id, OwnerPattern: "bob", AgentPattern: "*", CallerPattern: "group:friends", Permission: "All"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateRule(root, &agentsilov1.UpdateRuleRequest{Rule: &agentsilov1.AclRule{Id: 999, OwnerPattern: "bob", AgentPattern: "*", CallerPattern: "*", Permission: "All"}}); errs.Code(err) != codes.NotFound {
		t.Fatalf("UpdateRule of no rule: %v", err)
	}
	if _, err := s.SetGroup(root, &agentsilov1.SetGroupRequest{Group: &agentsilov1.AclGroup{Name: "friends", Members: []string{"carol", "alice", "alice"}}}); err != nil {
		t.Fatal(err)
	}
	g, err := s.ListGroups(root, &agentsilov1.ListGroupsRequest{})
	if err != nil || len(g.Groups) != 1 || g.Groups[0].Name != "friends" || len(g.Groups[0].Members) != 2 || g.Groups[0].Members[0] != "alice" {
		t.Fatalf("ListGroups: %v, %v", g, err)
	}
	c, err = s.Check(root, &agentsilov1.CheckRequest{Caller: "carol", Agent: "Echo:bob:x", Permission: "Configure"})
	if err != nil || !c.Allowed || c.Position != 1 || c.Rule.GetId() != added.Rule.Id || c.Granted != "All" {
		t.Fatalf("Check through the group: %v, %v", c, err)
	}
	if _, err := s.RemoveRule(root, &agentsilov1.RemoveRuleRequest{Id: added.Rule.Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetGroup(root, &agentsilov1.SetGroupRequest{Group: &agentsilov1.AclGroup{Name: "friends"}}); err != nil {
		t.Fatal(err)
	}
	l, err = s.ListRules(root, &agentsilov1.ListRulesRequest{})
	if err != nil || len(l.Rules) != 10 || l.SeedRule != nil {
		t.Fatalf("ListRules at the end: %v, %v", l, err)
	}
	if g, _ := s.ListGroups(root, &agentsilov1.ListGroupsRequest{}); len(g.GetGroups()) != 0 {
		t.Fatalf("groups left: %v", g)
	}
}
