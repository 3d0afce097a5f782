package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
)

// The audit commands: the audit log's records, and the check of its hash
// chains (see docs/audit.md).

// parseSince reads --since: an RFC 3339 time, or a duration back from now
// ("24h").
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (24h)", s)
	}
	return t, nil
}

func cmdAudit(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	var f client.AuditFilter
	var since, export string
	fs.StringVar(&f.Agent, "agent", "", "only the records of this agent (an address)")
	fs.StringVar(&f.Principal, "principal", "", "only the records on behalf of this principal")
	fs.StringVar(&f.Kind, "kind", "", "only the records of this kind (tool_call, a2a_task, mcp_call, approval, decision, acl, definition, conversation_delete, state_delete)")
	fs.StringVar(&since, "since", "", "only the records since this time (RFC 3339) or this long ago (24h)")
	fs.IntVar(&f.Limit, "limit", 0, "at most this many records, the most recent (0: 1000)")
	fs.StringVar(&export, "export", "", "write the records as jsonl (JSON lines) or otlp (an OTLP/JSON logs request)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("%s: takes no arguments, only flags", name)
	}
	if f.Since, err = parseSince(since, time.Now()); err != nil {
		return err
	}
	if export != "" && export != "jsonl" && export != "otlp" {
		return usagef("--export %q: want jsonl or otlp", export)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		recs, err := c.Audit().Records(ctx, f)
		if err != nil {
			return err
		}
		switch {
		case export == "jsonl":
			return audit.WriteJSONLines(g.stdout, recs)
		case export == "otlp":
			return audit.WriteOTLPJSON(g.stdout, recs)
		case g.output == "json":
			if recs == nil {
				recs = []audit.Record{}
			}
			b, err := json.Marshal(recs)
			if err != nil {
				return errs.Wrap(codes.Internal, err, "encode the records")
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		}
		if len(recs) == 0 {
			fmt.Fprintln(g.stdout, "none")
			return nil
		}
		for _, r := range recs {
			fmt.Fprintln(g.stdout, recordLine(&r))
		}
		return nil
	})
}

// recordLine is a record on one line: time, kind, principal, agent,
// skill, outcome, decision, tokens, place.
func recordLine(r *audit.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s  %s  %s", r.Time.UTC().Format(time.RFC3339Nano), r.Kind, orDash(strings.Join(r.OnBehalfOf, ">")), orDash(r.Agent))
	if r.Skill != "" {
		fmt.Fprintf(&b, " %s", r.Skill)
	}
	fmt.Fprintf(&b, "  %s", r.Outcome)
	if r.Decision != "" {
		fmt.Fprintf(&b, " (%s)", r.Decision)
	}
	if r.Tokens != 0 {
		fmt.Fprintf(&b, "  %d tokens", r.Tokens)
	}
	fmt.Fprintf(&b, "  %s/%d", r.Partition, r.Seq)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cmdAuditVerify(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("%s: takes no arguments", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		rep, err := c.Audit().Verify(ctx)
		if err != nil {
			return err
		}
		if g.output == "json" {
			b, err := json.Marshal(rep)
			if err != nil {
				return errs.Wrap(codes.Internal, err, "encode the report")
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
		} else if rep.OK {
			fmt.Fprintf(g.stdout, "ok: %d records in %d partitions match their chains\n", rep.Records, rep.Partitions)
		} else {
			fmt.Fprintf(g.stdout, "MISMATCH at record %s/%d (key %s): %s\n", rep.Bad.Partition, rep.Bad.Seq, orDash(rep.Bad.Key), rep.Reason)
		}
		if !rep.OK {
			return exitStatus(1)
		}
		return nil
	})
}
