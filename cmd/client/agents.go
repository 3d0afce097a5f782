package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The agent lifecycle and discovery commands: types, config, state,
// deactivate, reminders remove.

func cmdTypes(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	tag := fs.String("skill", "", "list only types with a skill carrying this `tag`")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		types, err := c.Admin().Types(ctx, *tag)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ListTypesResponse{Types: wireTypes(types)})
			return nil
		}
		return g.table("TYPE\tDESCRIPTION\tSKILLS", len(types), func(w io.Writer, i int) {
			t := types[i]
			var skills []string
			for _, sk := range t.Skills {
				s := sk.Name
				if len(sk.Tags) > 0 {
					s += " [" + strings.Join(sk.Tags, ",") + "]"
				}
				skills = append(skills, s)
			}
			name := t.Name
			if t.Declared {
				name += " (declared)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", name, t.Description, strings.Join(skills, "; "))
		})
	})
}

// oneAgent parses a command that takes exactly one AGENT.
func oneAgent(g *globals, name string, args []string, flags func(*flag.FlagSet)) (string, error) {
	fs := newFlagSet(name, g)
	if flags != nil {
		flags(fs)
	}
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usagef("%s: want one AGENT", name)
	}
	return pos[0], nil
}

func cmdConfig(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		ac, err := c.Agents().Config(ctx, agent)
		if err != nil {
			return err
		}
		cfg, found := ac.Values, ac.Found
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.GetConfigResponse{Address: agent, Config: cfg, Found: found})
			return nil
		}
		if !found {
			fmt.Fprintln(g.stdout, "none")
			return nil
		}
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(g.stdout, "%s=%s\n", k, cfg[k])
		}
		return nil
	})
}

func cmdConfigDelete(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Agents().DeleteConfig(ctx, agent); err != nil {
			return err
		}
		g.done("deleted the configuration of %s", agent)
		return nil
	})
}

func cmdState(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		st, err := c.Agents().State(ctx, agent)
		if err != nil {
			return err
		}
		data, etag := st.Data, st.ETag
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.GetStateResponse{Address: agent, Data: data, Etag: etag, Found: etag != ""})
			return nil
		}
		if etag == "" {
			fmt.Fprintln(g.stdout, "none")
			return nil
		}
		fmt.Fprintf(g.stderr, "etag %s\n", etag)
		g.stdout.Write(data)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			fmt.Fprintln(g.stdout)
		}
		return nil
	})
}

func cmdStateDelete(g *globals, name string, args []string) error {
	var etag *string
	agent, err := oneAgent(g, name, args, func(fs *flag.FlagSet) {
		etag = fs.String("etag", "", "delete only this `version`")
	})
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Agents().DeleteState(ctx, agent, client.IfETag(*etag)); err != nil {
			return err
		}
		g.done("deleted the state of %s", agent)
		return nil
	})
}

func cmdDeactivate(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		active, err := c.Agents().Deactivate(ctx, agent)
		if err != nil {
			return err
		}
		if !active {
			g.done("%s was not active", agent)
			return nil
		}
		g.done("deactivated %s", agent)
		return nil
	})
}

func cmdReminderRemove(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("%s: want AGENT NAME", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Agents().UnregisterReminder(ctx, pos[0], pos[1]); err != nil {
			return err
		}
		g.done("removed reminder %s of %s", pos[1], pos[0])
		return nil
	})
}

// done says what a command did, in text mode; -o json prints {}.
func (g *globals) done(format string, args ...any) {
	if g.output == "json" {
		fmt.Fprintln(g.stdout, "{}")
		return
	}
	fmt.Fprintf(g.stdout, format+"\n", args...)
}
