package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

const aclUsage = `acl rules            list the rules in order (the first that matches decides)
  acl add --owner P [--agent P] --caller P --perm LIST [--at N]
                       add a rule (at position N, 1 first; default last)
  acl update ID --owner P [--agent P] --caller P --perm LIST
                       replace a rule
  acl remove ID        remove a rule
  acl groups           list the groups
  acl group NAME MEMBER...
                       set a group's members (none: remove the group)
  acl check --caller C --perm P [--group G]... AGENT
                       explain a decision (AGENT is Type:owner:alias or owner:alias)`

// cmdACL runs the acl subcommands.
func cmdACL(g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("acl: want rules, add, update, remove, groups, group or check")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "rules":
		return aclRules(g, args)
	case "add", "update":
		return aclPut(g, sub, args)
	case "remove", "rm":
		return aclRemove(g, args)
	case "groups":
		return aclGroups(g, args)
	case "group":
		return aclGroup(g, args)
	case "check":
		return aclCheck(g, args)
	}
	return usagef("acl: unknown subcommand %q", sub)
}

func noArgs(fs string, pos []string) error {
	if len(pos) > 0 {
		return usagef("%s: unexpected argument %q", fs, pos[0])
	}
	return nil
}

func aclRules(g *globals, args []string) error {
	pos, err := parse(newFlagSet("acl rules", g), args)
	if err != nil {
		return err
	}
	if err := noArgs("acl rules", pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		rules, seed, rev, err := c.ACLRules(ctx)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.ListRulesResponse{Rules: rules, SeedRule: seed, Revision: rev})
			return nil
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POS\tID\tOWNER\tAGENT\tCALLER\tPERMISSION")
		for i, r := range rules {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", i+1, r.Id, r.OwnerPattern, r.AgentPattern, r.CallerPattern, r.Permission)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if seed != nil {
			fmt.Fprintf(g.stdout, "(no rules set: the seed rule %s:%s -> %s -> %s applies)\n", seed.OwnerPattern, seed.AgentPattern, seed.CallerPattern, seed.Permission)
		}
		return nil
	})
}

func aclPut(g *globals, sub string, args []string) error {
	fs := newFlagSet("acl "+sub, g)
	r := &client.ACLRule{}
	fs.StringVar(&r.OwnerPattern, "owner", "", "owner pattern: *, prefix* or a name")
	fs.StringVar(&r.AgentPattern, "agent", "*", "agent (alias) pattern: *, prefix* or a name")
	fs.StringVar(&r.CallerPattern, "caller", "", "caller pattern: *, group:NAME or a principal")
	fs.StringVar(&r.Permission, "perm", "", "permissions: Message, Configure, Read, Admin, All, None; comma-separated")
	at := fs.Int("at", 0, "position, 1 for the first (default: last)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if r.OwnerPattern == "" || r.CallerPattern == "" || r.Permission == "" {
		return usagef("acl %s: --owner, --caller and --perm are required", sub)
	}
	if sub == "update" {
		if len(pos) != 1 {
			return usagef("acl update: want one rule ID")
		}
		if r.Id, err = strconv.ParseUint(pos[0], 10, 64); err != nil {
			return usagef("acl update: rule ID %q: want a number", pos[0])
		}
	} else if err := noArgs("acl add", pos); err != nil {
		return err
	}
	if *at < 0 {
		return usagef("acl add: --at %d: want 1 or more", *at)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if sub == "update" {
			if err := c.UpdateACLRule(ctx, r, 0); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "updated rule %d\n", r.Id)
			return nil
		}
		added, p, err := c.AddACLRule(ctx, r, *at, 0)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.AddRuleResponse{Rule: added, Position: int32(p)})
			return nil
		}
		fmt.Fprintf(g.stdout, "added rule %d at position %d\n", added.Id, p)
		return nil
	})
}

func aclRemove(g *globals, args []string) error {
	pos, err := parse(newFlagSet("acl remove", g), args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("acl remove: want one rule ID")
	}
	id, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil {
		return usagef("acl remove: rule ID %q: want a number", pos[0])
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		return c.RemoveACLRule(ctx, id, 0)
	})
}

func aclGroups(g *globals, args []string) error {
	pos, err := parse(newFlagSet("acl groups", g), args)
	if err != nil {
		return err
	}
	if err := noArgs("acl groups", pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		groups, err := c.ACLGroups(ctx)
		if err != nil {
			return err
		}
		names := slices.Sorted(maps.Keys(groups))
		if g.output == "json" {
			out := &agentsilov1.ListGroupsResponse{}
			for _, n := range names {
				out.Groups = append(out.Groups, &agentsilov1.AclGroup{Name: n, Members: groups[n]})
			}
			g.printJSON(g.stdout, out)
			return nil
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tMEMBERS")
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%s\n", n, strings.Join(groups[n], ","))
		}
		return tw.Flush()
	})
}

func aclGroup(g *globals, args []string) error {
	pos, err := parse(newFlagSet("acl group", g), args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("acl group: want NAME MEMBER...")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		return c.SetACLGroup(ctx, pos[0], pos[1:], 0)
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func aclCheck(g *globals, args []string) error {
	fs := newFlagSet("acl check", g)
	caller := fs.String("caller", "", "the principal to check for")
	perm := fs.String("perm", "", "the permission: Message, Configure, Read or Admin")
	var groups stringList
	fs.Var(&groups, "group", "a group the caller's credentials give it (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *caller == "" || *perm == "" {
		return usagef("acl check: want --caller C --perm P AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		r, err := c.CheckACL(ctx, *caller, pos[0], *perm, groups...)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, r)
			return nil
		}
		verdict := "denied"
		if r.Allowed {
			verdict = "allowed"
		}
		switch {
		case r.Rule != nil && r.Position == 0:
			fmt.Fprintf(g.stdout, "%s: the seed rule %s:%s -> %s -> %s (no rules set)\n", verdict, r.Rule.OwnerPattern, r.Rule.AgentPattern, r.Rule.CallerPattern, r.Rule.Permission)
		case r.Rule != nil:
			fmt.Fprintf(g.stdout, "%s: rule %d at position %d: %s:%s -> %s -> %s\n", verdict, r.Rule.Id, r.Position, r.Rule.OwnerPattern, r.Rule.AgentPattern, r.Rule.CallerPattern, r.Rule.Permission)
		default:
			fmt.Fprintf(g.stdout, "%s: %s\n", verdict, r.Reason)
		}
		return nil
	})
}
