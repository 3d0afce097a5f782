package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
)

// The approvals commands: a model agent's tool calls that wait for a
// person, listed and decided through its typed skills approvals and
// decide (see llm.Approval and llm.Decision; the client does not link
// package llm, so their JSON is read into the shapes below).

const (
	approvalsSkill = "approvals" // llm.SkillApprovals
	decideSkill    = "decide"    // llm.SkillDecide
)

type approval struct {
	ID   string `json:"id"`
	Call struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"call"`
	Deadline time.Time `json:"deadline"`
}

type decision struct {
	ID        string          `json:"id"`
	Approve   bool            `json:"approve"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

type decided struct {
	ID       string `json:"id"`
	Turn     string `json:"turn"`
	Decision string `json:"decision"`
}

func cmdApprovals(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		aps, err := client.AskTyped[struct{}, []approval](ctx, c, agent, approvalsSkill, struct{}{})
		if err != nil {
			return err
		}
		if g.output == "json" {
			if aps == nil {
				aps = []approval{}
			}
			b, err := json.Marshal(aps)
			if err != nil {
				return errs.Wrap(codes.Internal, err, "encode the approvals")
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		}
		if len(aps) == 0 {
			fmt.Fprintln(g.stdout, "none")
			return nil
		}
		for _, ap := range aps {
			fmt.Fprintf(g.stdout, "%s  %s %s  until %s\n", ap.ID, ap.Call.Name, clipLine(ap.Call.Arguments, 300), ap.Deadline.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

func cmdApprove(g *globals, name string, args []string) error {
	var argsJSON *string
	id, err := oneApproval(g, name, args, func(fs *flag.FlagSet) {
		argsJSON = fs.String("args", "", "run the call with these `JSON` arguments instead of the model's (checked against the tool's schema)")
	})
	if err != nil {
		return err
	}
	d := decision{ID: id, Approve: true}
	if *argsJSON != "" {
		if !json.Valid([]byte(*argsJSON)) || !strings.HasPrefix(strings.TrimSpace(*argsJSON), "{") {
			return usagef("%s: --args: want a JSON object", name)
		}
		d.Arguments = json.RawMessage(*argsJSON)
	}
	return decide(g, d)
}

func cmdDeny(g *globals, name string, args []string) error {
	var reason *string
	id, err := oneApproval(g, name, args, func(fs *flag.FlagSet) {
		reason = fs.String("reason", "", "why, as the model is told")
	})
	if err != nil {
		return err
	}
	return decide(g, decision{ID: id, Reason: *reason})
}

// oneApproval parses the one ID of an approvals command.
func oneApproval(g *globals, name string, args []string, flags func(*flag.FlagSet)) (string, error) {
	fs := newFlagSet(name, g)
	flags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usagef("%s: want one approval ID", name)
	}
	if _, _, ok := approvalAgent(pos[0]); !ok {
		return "", usagef("%s: %q is not an approval id (AGENT/ID, as approvals lists them)", name, pos[0])
	}
	return pos[0], nil
}

// approvalAgent is the agent of an approval id, <agent address>/<uuid>.
func approvalAgent(id string) (agent, rest string, ok bool) {
	agent, rest, ok = strings.Cut(id, "/")
	return agent, rest, ok && agent != "" && rest != "" && strings.Count(agent, ":") == 2
}

func decide(g *globals, d decision) error {
	agent, _, _ := approvalAgent(d.ID)
	return g.with(func(ctx context.Context, c *client.Client) error {
		out, err := client.AskTyped[decision, decided](ctx, c, agent, decideSkill, d)
		if err != nil {
			return err
		}
		if g.output == "json" {
			b, err := json.Marshal(out)
			if err != nil {
				return errs.Wrap(codes.Internal, err, "encode the decision")
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		}
		g.done("%s %s (turn %s)", out.Decision, out.ID, out.Turn)
		return nil
	})
}

// clipLine is s on one line, cut at n bytes.
func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		i := n
		for i > 0 && s[i]&0xC0 == 0x80 {
			i--
		}
		s = s[:i] + "..."
	}
	return s
}
