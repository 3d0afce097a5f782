package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentsilo/agentsilo/client"
)

// The working memory commands: memory put, get, delete, list, search
// (client.Memory against a Memory:owner:scope agent). They are added to
// the commands of help.go, before version and help (this file's init runs
// after help.go's: files initialise in name order).

func init() {
	at := slices.IndexFunc(commands, func(c *cmdSpec) bool { return c.name == "version" })
	if at < 0 {
		at = len(commands)
	}
	commands = slices.Insert(commands, at, memoryCommands()...)
}

func memoryCommands() []*cmdSpec {
	const mem = `

MEMORY is a working memory agent, Memory:owner:scope (Memory:scope for
one of your own).`
	return []*cmdSpec{
		{"memory put", "MEMORY KEY [TEXT...|-]", "store an entry in a working memory",
			`Stores an entry under KEY with TEXT (as for ask) and/or --value JSON,
--category, --tag (repeatable) and --ttl (default 60m), replacing one of
the same key; prints when it expires. Over the memory's bounds it is
ResourceExhausted (exit 1).` + mem, cmdMemoryPut},
		{"memory get", "MEMORY KEY", "print an entry of a working memory",
			`Prints the entry's text (else its value); -o json the whole entry.
NotFound (exit 3) if there is none or it expired.` + mem, cmdMemoryGet},
		{"memory delete", "MEMORY KEY", "remove an entry of a working memory",
			`Removes the entry of KEY, if any; prints nothing.` + mem, cmdMemoryDelete},
		{"memory list", "MEMORY", "list the entries of a working memory",
			`Lists the live entries by key (--prefix, --category, --tag filter
them; --limit, default 100): key, category, tags, expiry, text; "none"
if there are none (-o json: a list).` + mem, cmdMemoryList},
		{"memory search", "MEMORY WORDS...", "find entries containing every word",
			`Lists, as memory list does, the entries whose key, text, category,
tags or value contain every word (case-insensitive).` + mem, cmdMemorySearch},
	}
}

// strs is a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

func cmdMemoryPut(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	var e client.MemoryEntry
	var value string
	var tags strs
	fs.StringVar(&value, "value", "", "the entry's `JSON` value")
	fs.StringVar(&e.Category, "category", "", "the entry's `category`")
	fs.Var(&tags, "tag", "a `tag` (repeatable)")
	fs.DurationVar(&e.TTL, "ttl", 0, "how long the entry is kept (default 60m)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("%s: want MEMORY KEY [TEXT...|-]", name)
	}
	e.Key, e.Tags = pos[1], tags
	if value != "" {
		if !json.Valid([]byte(value)) {
			return usagef("--value: not JSON")
		}
		e.Value = json.RawMessage(value)
	}
	if len(pos) > 2 || value == "" {
		if e.Text, err = g.text(name, pos[2:]); err != nil {
			return err
		}
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		got, err := client.NewMemory(c, pos[0]).Put(ctx, e)
		if err != nil {
			return err
		}
		if g.output == "json" {
			return printAny(g, got)
		}
		fmt.Fprintf(g.stdout, "%s (expires %s)\n", got.Key, got.Expires.Local().Format(time.RFC3339))
		return nil
	})
}

func cmdMemoryGet(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("%s: want MEMORY KEY", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		e, err := client.NewMemory(c, pos[0]).Get(ctx, pos[1])
		if err != nil {
			return err
		}
		if g.output == "json" {
			return printAny(g, e)
		}
		if e.Text != "" || len(e.Value) == 0 {
			fmt.Fprintln(g.stdout, e.Text)
		} else {
			fmt.Fprintln(g.stdout, string(e.Value))
		}
		return nil
	})
}

func cmdMemoryDelete(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("%s: want MEMORY KEY", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		return client.NewMemory(c, pos[0]).Delete(ctx, pos[1])
	})
}

func cmdMemoryList(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	var q client.MemoryQuery
	fs.StringVar(&q.Prefix, "prefix", "", "keys starting with `prefix`")
	fs.StringVar(&q.Category, "category", "", "entries of `category`")
	fs.StringVar(&q.Tag, "tag", "", "entries carrying `tag`")
	fs.IntVar(&q.Limit, "limit", 0, "at most `n` entries (default 100)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want MEMORY", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		es, err := client.NewMemory(c, pos[0]).List(ctx, q)
		if err != nil {
			return err
		}
		return printEntries(g, es)
	})
}

func cmdMemorySearch(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	limit := fs.Int("limit", 0, "at most `n` entries (default 100)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("%s: want MEMORY WORDS...", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		es, err := client.NewMemory(c, pos[0]).Search(ctx, strings.Join(pos[1:], " "), *limit)
		if err != nil {
			return err
		}
		return printEntries(g, es)
	})
}

// printEntries prints entries as a table, or as JSON.
func printEntries(g *globals, es []client.MemoryEntry) error {
	if g.output == "json" {
		if es == nil {
			es = []client.MemoryEntry{}
		}
		return printAny(g, es)
	}
	if len(es) == 0 {
		fmt.Fprintln(g.stdout, "none")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for _, e := range es {
		text := e.Text
		if text == "" {
			text = string(e.Value)
		}
		if len(text) > 60 {
			text = text[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Key, e.Category, strings.Join(e.Tags, ","), e.Expires.Local().Format(time.RFC3339), strings.ReplaceAll(text, "\n", " "))
	}
	return tw.Flush()
}

// printAny prints v as indented JSON.
func printAny(g *globals, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, string(b))
	return nil
}
