package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The service directory's commands: search, directory list, get, add,
// remove. help.go adds them to its commands (withDirectoryCommands).

// withDirectoryCommands inserts the directory's commands into cs before
// version and help.
func withDirectoryCommands(cs []*cmdSpec) []*cmdSpec {
	at := slices.IndexFunc(cs, func(c *cmdSpec) bool { return c.name == "version" })
	if at < 0 {
		at = len(cs)
	}
	const access = `

Reading the directory needs Read on system:directory; adding and
removing entries needs Admin on it.`
	return slices.Insert(cs, at, []*cmdSpec{
		{"search", "WORDS...", "search the directory: agent types, outside A2A agents, MCP tools",
			`Ranks the directory's entries by how well their names, descriptions,
skills, tags, examples and tools match WORDS (BM25) and prints the best
(--limit, default 20): score, kind, name, how to call it, description.
--kind keeps one kind (type, a2a, mcp), --tag entries with a skill of
that tag (an MCP server: a tool of that name). "none" if nothing
matches (-o json: a list of hits).` + access, cmdSearch},
		{"directory list", "", "list the directory's entries",
			`Lists the agent types, outside A2A agents and MCP servers (--kind,
--tag filter them): kind, name, how to call it, when an outside entry
last answered and its last error. At most --limit (default 500); when
there are more, stderr says the --after that lists them.` + access, cmdDirectoryList},
		{"directory get", "NAME", "show one directory entry",
			`Prints an entry (NAME, or KIND/NAME) with its skills and tools; NotFound
(exit 3) if there is none.` + access, cmdDirectoryGet},
		{"directory add", "NAME URL", "add an outside A2A agent or MCP server",
			`Adds (or replaces) the outside entry NAME: an A2A agent at URL (its
base URL, the card at URL/.well-known/agent-card.json, or the card's own
URL), or with --kind mcp an MCP server's streamable HTTP endpoint.
--header K=V (repeatable) is sent with every request to it: credentials,
kept in the cluster and never shown again. --skill pins a skill, listed
whatever the card says: NAME, NAME:TAG,TAG or NAME:TAGS=DESCRIPTION.
Agents then call it by name: A2A:owner:NAME or MCP:owner:NAME. An A2A
agent's --trust is observe (every call a model agent makes to it waits
for a person's approval; its own requests, as --principal, are refused)
or act (the default: calls naming an --approve-skill, repeatable, run
without approval and others wait; without any, every call runs).` + access, cmdDirectoryAdd},
		{"directory remove", "NAME", "remove an outside entry",
			`Removes the outside entry NAME; NotFound (exit 3) if there is none.` + access, cmdDirectoryRemove},
	}...)
}

func cmdSearch(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	var q client.DirectoryQuery
	fs.StringVar(&q.Kind, "kind", "", "keep one `kind`: type, a2a or mcp")
	fs.StringVar(&q.Tag, "tag", "", "keep entries with a skill carrying this `tag` (MCP: a tool name)")
	limit := fs.Int("limit", 20, "print at most `N` hits")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s: want WORDS to search for", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		hits, err := c.Directory().Search(ctx, strings.Join(pos, " "), q, client.Limit(*limit))
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.DirectorySearchResponse{Hits: wireHits(hits)})
			return nil
		}
		return g.table("SCORE\tKIND\tNAME\tCALL\tDESCRIPTION", len(hits), func(w io.Writer, i int) {
			e := hits[i].Entry
			fmt.Fprintf(w, "%.2f\t%s\t%s\t%s\t%s\n", hits[i].Score, e.Kind, e.Name, e.Call, oneLine(e.Description))
		})
	})
}

func cmdDirectoryList(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	var q client.DirectoryQuery
	fs.StringVar(&q.Kind, "kind", "", "keep one `kind`: type, a2a or mcp")
	fs.StringVar(&q.Tag, "tag", "", "keep entries with a skill carrying this `tag` (MCP: a tool name)")
	limit := fs.Int("limit", 500, "list at most `N` entries (at most 1000)")
	after := fs.String("after", "", "list the entries after this `kind/name` (the next page)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		page, err := c.Directory().List(ctx, q, client.After(*after), client.Limit(*limit))
		if err != nil {
			return err
		}
		entries, next := page.Items, page.Next
		if g.output == "json" {
			g.printList(&agentsilov1.DirectoryListResponse{Entries: wireEntries(entries), Next: next})
			return nil
		}
		err = g.table("KIND\tNAME\tCALL\tLAST SEEN\tLAST ERROR", len(entries), func(w io.Writer, i int) {
			e := entries[i]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Kind, e.Name, e.Call, lastSeen(e), oneLine(e.LastError))
		})
		if err == nil && next != "" {
			fmt.Fprintf(g.stderr, "more: --after %s\n", next)
		}
		return err
	})
}

func cmdDirectoryGet(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want one NAME", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		e, err := c.Directory().Get(ctx, pos[0])
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, wireEntry(e))
			return nil
		}
		w := g.stdout
		fmt.Fprintf(w, "%s %s\ncall: %s\n", e.Kind, e.Name, e.Call)
		if e.URL != "" {
			fmt.Fprintf(w, "url: %s\nlast seen: %s\n", e.URL, lastSeen(e))
		}
		if e.LastError != "" {
			fmt.Fprintf(w, "last error: %s\n", flat(e.LastError))
		}
		if e.Description != "" {
			fmt.Fprintf(w, "description: %s\n", flat(e.Description))
		}
		for _, sk := range e.Skills {
			fmt.Fprintf(w, "skill %s", sk.Name)
			if len(sk.Tags) > 0 {
				fmt.Fprintf(w, " [%s]", strings.Join(sk.Tags, ","))
			}
			if sk.Description != "" {
				fmt.Fprintf(w, ": %s", flat(sk.Description))
			}
			fmt.Fprintln(w)
		}
		for _, t := range e.Tools {
			fmt.Fprintf(w, "tool %s: %s\n", t.Name, flat(t.Description))
		}
		return nil
	})
}

func cmdDirectoryAdd(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	req := client.OutsideEntry{Headers: map[string]string{}}
	fs.StringVar(&req.Kind, "kind", "a2a", "`kind` of entry: a2a or mcp")
	fs.StringVar(&req.Description, "description", "", "`text` that replaces the card's description")
	fs.Func("header", "`K=V` header sent with every request to it (repeatable; a credential, never shown)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V") // not the value: a credential
		}
		req.Headers[k] = v
		return nil
	})
	fs.Func("skill", "pin a skill: `NAME[:TAG,TAG][=DESCRIPTION]` (repeatable)", func(s string) error {
		spec, desc, _ := strings.Cut(s, "=")
		n, tags, _ := strings.Cut(spec, ":")
		if n == "" {
			return fmt.Errorf("want NAME[:TAG,TAG][=DESCRIPTION], got %q", clipArg(s))
		}
		sk := client.Skill{Name: n, Description: desc}
		if tags != "" {
			sk.Tags = strings.Split(tags, ",")
		}
		req.Skills = append(req.Skills, sk)
		return nil
	})
	fs.StringVar(&req.Trust, "trust", "", "an A2A agent's trust `level`: observe or act (default act)")
	fs.Func("approve-skill", "at trust act, a `SKILL` whose calls run without approval (repeatable)", func(s string) error {
		req.ApprovedSkills = append(req.ApprovedSkills, s)
		return nil
	})
	fs.StringVar(&req.Principal, "principal", "", "the `PRINCIPAL` the A2A agent calls the cluster as")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("%s: want NAME URL", name)
	}
	req.Name, req.URL = pos[0], pos[1]
	return g.with(func(ctx context.Context, c *client.Client) error {
		e, err := c.Directory().Add(ctx, req)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, wireEntry(e))
			return nil
		}
		fmt.Fprintf(g.stdout, "%s %s: %s\n", e.Kind, e.Name, e.Call)
		return nil
	})
}

func cmdDirectoryRemove(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want one NAME", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Directory().Remove(ctx, pos[0]); err != nil {
			return err
		}
		g.done("removed %s from the directory", pos[0])
		return nil
	})
}

// lastSeen says when an outside entry last answered: "never", or a UTC
// time; "-" for a type.
func lastSeen(e client.DirectoryEntry) string {
	switch {
	case e.Kind == "type":
		return "-"
	case e.LastSeen.IsZero():
		return "never"
	}
	return e.LastSeen.UTC().Format(time.RFC3339)
}

// flat puts s on one line.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// clipArg keeps a usage error short.
func clipArg(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
