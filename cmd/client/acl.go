package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// aclUsage writes the usage of the acl commands.
func aclUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: client acl SUBCOMMAND [args] [flags]")
	fmt.Fprintln(w, "\nThe cluster's access control list; changing it needs Admin on system:acl\nor membership of group admins.\n\nsubcommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, "acl "); ok {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(sub+" "+shortArgs(c.args)), c.summary)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'client help acl SUBCOMMAND' for a subcommand's flags.")
}

// cmdACL runs the acl subcommands.
func cmdACL(g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("acl: want rules, add, update, remove, groups, group or check")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return helpRequest{newFlagSet("acl", g)}
	case "rm":
		args = append([]string{"remove"}, args[1:]...)
	}
	c, rest := lookup(append([]string{"acl"}, args...))
	if c == nil {
		return usagef("acl: unknown subcommand %q", args[0])
	}
	return c.run(g, c.name, rest)
}

func noArgs(fs string, pos []string) error {
	if len(pos) > 0 {
		return usagef("%s: unexpected argument %q", fs, pos[0])
	}
	return nil
}

func aclRules(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		acl, err := c.ACL().Rules(ctx)
		if err != nil {
			return err
		}
		rules, seed, rev := acl.Rules, acl.Seed, acl.Revision
		if g.output == "json" {
			g.printList(&agentsilov1.ListRulesResponse{Rules: wireRules(rules), SeedRule: wireRule(seed), Revision: rev})
			return nil
		}
		err = g.table("POS\tID\tOWNER\tAGENT\tCALLER\tPERMISSION", len(rules), func(w io.Writer, i int) {
			r := rules[i]
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\n", i+1, r.ID, r.OwnerPattern, r.AgentPattern, r.CallerPattern, r.Permission)
		})
		if err != nil {
			return err
		}
		if seed != nil {
			fmt.Fprintf(g.stdout, "(no rules set: the seed rule %s:%s -> %s -> %s applies)\n", seed.OwnerPattern, seed.AgentPattern, seed.CallerPattern, seed.Permission)
		}
		return nil
	})
}

func aclPut(g *globals, name string, args []string) error {
	sub := strings.TrimPrefix(name, "acl ")
	fs := newFlagSet(name, g)
	r := client.ACLRule{}
	fs.StringVar(&r.OwnerPattern, "owner", "", "owner `pattern`: *, prefix* or a name (required)")
	fs.StringVar(&r.AgentPattern, "agent", "*", "agent (alias) `pattern`: *, prefix* or a name")
	fs.StringVar(&r.CallerPattern, "caller", "", "caller `pattern`: *, group:NAME or a principal (required)")
	fs.StringVar(&r.Permission, "perm", "", "`permissions`: Message, Configure, Read, Admin, Approve, All, None; comma-separated (required)")
	at := new(int)
	if sub == "add" {
		fs.IntVar(at, "at", 0, "`position`, 1 for the first (default: last)")
	}
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
		if r.ID, err = strconv.ParseUint(pos[0], 10, 64); err != nil {
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
			if err := c.ACL().UpdateRule(ctx, r); err != nil {
				return err
			}
			if g.output == "json" {
				g.printJSON(g.stdout, &agentsilov1.UpdateRuleResponse{Rule: wireRule(&r)})
			} else {
				fmt.Fprintf(g.stdout, "updated rule %d\n", r.ID)
			}
			return nil
		}
		// While no rules are set, the seed rule applies; the first rule
		// added replaces it, which the command says. Then the rule is
		// added to the revision read, so that the note is true (another
		// change meanwhile is a conflict).
		acl, err := c.ACL().Rules(ctx)
		if err != nil {
			return err
		}
		seed, rev := acl.Seed, acl.Revision
		if seed == nil {
			rev = 0
		}
		a, err := c.ACL().AddRule(ctx, r, client.At(*at), client.IfRevision(rev))
		if err != nil {
			return err
		}
		added, p := a.Rule, a.Position
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.AddRuleResponse{Rule: wireRule(&added), Position: int32(p)})
		} else {
			fmt.Fprintf(g.stdout, "added rule %d at position %d\n", added.ID, p)
		}
		if seed != nil {
			fmt.Fprintf(g.stderr, "note: it replaces the seed rule %s:%s -> %s -> %s, which applied while no rules were set; to keep what it allowed: client acl add --owner %s --agent '%s' --caller '%s' --perm %s\n",
				seed.OwnerPattern, seed.AgentPattern, seed.CallerPattern, seed.Permission, seed.OwnerPattern, seed.AgentPattern, seed.CallerPattern, seed.Permission)
		}
		return nil
	})
}

func aclRemove(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
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
		if err := c.ACL().RemoveRule(ctx, id); err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.RemoveRuleRequest{Id: id})
		} else {
			fmt.Fprintf(g.stdout, "removed rule %d\n", id)
		}
		return nil
	})
}

func aclGroups(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		groups, err := c.ACL().Groups(ctx)
		if err != nil {
			return err
		}
		names := slices.Sorted(maps.Keys(groups))
		if g.output == "json" {
			out := &agentsilov1.ListGroupsResponse{}
			for _, n := range names {
				out.Groups = append(out.Groups, &agentsilov1.AclGroup{Name: n, Members: groups[n]})
			}
			g.printList(out)
			return nil
		}
		return g.table("GROUP\tMEMBERS", len(names), func(w io.Writer, i int) {
			fmt.Fprintf(w, "%s\t%s\n", names[i], strings.Join(groups[names[i]], ", "))
		})
	})
}

func aclGroup(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("acl group: want NAME MEMBER...")
	}
	group, members := pos[0], pos[1:]
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := c.ACL().SetGroup(ctx, group, members); err != nil {
			return err
		}
		switch {
		case g.output == "json":
			g.printList(&agentsilov1.AclGroup{Name: group, Members: members})
		case len(members) == 0:
			fmt.Fprintf(g.stdout, "group %s removed\n", group)
		default:
			fmt.Fprintf(g.stdout, "group %s: %s\n", group, strings.Join(members, ", "))
		}
		return nil
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// aclDenied is acl check's exit status for a denial: that of
// PermissionDenied.
const aclDenied = exitStatus(4)

func aclCheck(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	caller := fs.String("caller", "", "the `principal` to check for (required)")
	perm := fs.String("perm", "", "the `permission`: Message, Configure, Read, Admin or Approve (required)")
	var groups stringList
	fs.Var(&groups, "group", "a `group` the caller's credentials give it (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *caller == "" || *perm == "" {
		return usagef("acl check: want --caller C --perm P AGENT")
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		r, err := c.ACL().Check(ctx, *caller, pos[0], *perm, client.InGroups(groups...))
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, wireDecision(r))
		} else {
			g.printVerdict(r)
		}
		if !r.Allowed {
			return aclDenied
		}
		return nil
	})
}

// printVerdict writes acl check's answer in text.
func (g *globals) printVerdict(r client.Decision) {
	verdict := "denied"
	if r.Allowed {
		verdict = "allowed"
	}
	switch {
	case r.Rule != nil && r.Position == 0:
		fmt.Fprintf(g.stdout, "%s: the seed rule %s:%s -> %s -> %s (no rules set)\n", verdict, r.Rule.OwnerPattern, r.Rule.AgentPattern, r.Rule.CallerPattern, r.Rule.Permission)
	case r.Rule != nil:
		fmt.Fprintf(g.stdout, "%s: rule %d at position %d: %s:%s -> %s -> %s\n", verdict, r.Rule.ID, r.Position, r.Rule.OwnerPattern, r.Rule.AgentPattern, r.Rule.CallerPattern, r.Rule.Permission)
	default:
		fmt.Fprintf(g.stdout, "%s: %s\n", verdict, r.Reason)
	}
}
