package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The commands of the agent types declared without code: types apply,
// types delete (`types` itself, in agents.go, lists them among the
// others). help.go adds them to its commands (withTypeCommands).

// withTypeCommands inserts the declared types' commands into cs before
// `types`, whose name is the first word of theirs.
func withTypeCommands(cs []*cmdSpec) []*cmdSpec {
	at := slices.IndexFunc(cs, func(c *cmdSpec) bool { return c.name == "types" })
	if at < 0 {
		at = len(cs)
	}
	const access = `

Needs Admin on system:types, or administration of the ACL (on a
development gateway: --as system).`
	return slices.Insert(cs, at, []*cmdSpec{
		{"types apply", "FILE|-", "declare a model agent type, or replace one",
			`Stores the definition in FILE (YAML or JSON; "-" reads stdin: a model
agent type, see docs/models.md) in the cluster, and every silo serves the
type at once, with no restart; a type of that name declared before is
replaced (its running agents end after their current turn and start again
with the new definition). Prints what it did (created, replaced,
unchanged) once every silo serves it; silos that did not confirm before
the deadline are named on stderr. --dry-run validates the definition and
its name without storing it. A definition that does not validate is
InvalidArgument naming the field (exit 2); a type registered in code is
FailedPrecondition (exit 1). The definition names the environment
variable holding the model's API key (model.api_key_env), never the key.` + access, cmdTypesApply},
		{"types delete", "TYPE", "remove a declared agent type",
			`Removes the declared type TYPE from every silo (its running agents end
after their current turn; their state stays). NotFound (exit 3) if no
such type is declared; a type registered in code cannot be deleted
(FailedPrecondition, exit 1).` + access, cmdTypesDelete},
	}...)
}

func cmdTypesApply(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	dryRun := fs.Bool("dry-run", false, "validate the definition without storing it")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want one FILE (or - for stdin)", name)
	}
	var def []byte
	if pos[0] == "-" {
		def, err = io.ReadAll(g.stdin)
	} else {
		def, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return usagef("%s: %w", name, err)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		var opts []client.CallOption
		if *dryRun {
			opts = append(opts, client.DryRun())
		}
		a, err := c.Admin().ApplyType(ctx, def, opts...)
		if err != nil {
			return err
		}
		if len(a.Unconfirmed) > 0 {
			fmt.Fprintf(g.stderr, "warning: not yet confirmed by silo(s) %s: they serve the change once they read it\n", strings.Join(a.Unconfirmed, ", "))
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ApplyTypeResponse{
				Type:    &agentsilov1.DeclaredType{Name: a.Type.Name, Definition: a.Type.Definition, Revision: a.Type.Revision},
				Created: a.Created, Unchanged: a.Unchanged, Unconfirmed: a.Unconfirmed,
			})
			return nil
		}
		what := "replaced"
		switch {
		case a.Unchanged:
			what = "unchanged"
		case a.Created:
			what = "created"
		}
		if *dryRun {
			if a.Unchanged {
				what = "unchanged: the same definition is stored"
			} else if a.Created {
				what = "would be created"
			} else {
				what = "would be replaced"
			}
			fmt.Fprintf(g.stdout, "valid: type %s %s (dry run: nothing stored)\n", a.Type.Name, what)
			return nil
		}
		if a.Unchanged {
			fmt.Fprintf(g.stdout, "type %s unchanged\n", a.Type.Name)
		} else {
			fmt.Fprintf(g.stdout, "%s type %s\n", what, a.Type.Name)
		}
		return nil
	})
}

func cmdTypesDelete(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want one TYPE", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		unconfirmed, err := c.Admin().DeleteType(ctx, pos[0])
		if err != nil {
			return err
		}
		if len(unconfirmed) > 0 {
			fmt.Fprintf(g.stderr, "warning: not yet confirmed by silo(s) %s: they remove the type once they read it\n", strings.Join(unconfirmed, ", "))
		}
		g.done("deleted type %s", pos[0])
		return nil
	})
}
