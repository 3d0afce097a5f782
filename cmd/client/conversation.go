package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
)

// The conversation command: a model agent's recorded conversation, read
// through its conversation skill (a typed skill: {} in, the record as
// JSON out), which answers even while a turn runs (an interleaving
// skill). The client does not link package llm (its model SDKs): the
// record's JSON is read into the shapes below, the fields it prints.

// conversationSkill is llm.SkillConversation.
const conversationSkill = "conversation"

func cmdConversationDelete(g *globals, name string, args []string) error {
	agent, err := oneAgent(g, name, args, nil)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := checkConversationSkill(ctx, c, agent); err != nil {
			return err
		}
		if err := c.Conversations().Delete(ctx, agent); err != nil {
			return err
		}
		fmt.Fprintln(g.stdout, "deleted")
		return nil
	})
}

// ownerFlag parses the one flag, --owner, of the conversations commands.
func ownerFlag(g *globals, name string, args []string) (string, error) {
	fs := newFlagSet(name, g)
	owner := fs.String("owner", "", "the `OWNER` whose model agents' conversations (needed)")
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if err := noArgs(name, pos); err != nil {
		return "", err
	}
	if *owner == "" {
		return "", usagef("%s: want --owner OWNER", name)
	}
	return *owner, nil
}

func cmdConversations(g *globals, name string, args []string) error {
	owner, err := ownerFlag(g, name, args)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		agents, err := c.Conversations().List(ctx, owner)
		if err != nil {
			return err
		}
		if g.output == "json" {
			if agents == nil {
				agents = []string{}
			}
			b, err := json.Marshal(agents)
			if err != nil {
				return errs.Wrap(codes.Internal, err, "encode the list")
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		}
		if len(agents) == 0 {
			fmt.Fprintln(g.stdout, "none")
			return nil
		}
		for _, a := range agents {
			fmt.Fprintln(g.stdout, a)
		}
		return nil
	})
}

func cmdConversationsDelete(g *globals, name string, args []string) error {
	owner, err := ownerFlag(g, name, args)
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		n, err := c.Conversations().DeleteAll(ctx, owner)
		fmt.Fprintf(g.stdout, "deleted %d conversations\n", n)
		return err
	})
}

// convRecord is the part of llm.Conversation the text output prints.
type convRecord struct {
	Messages []convMessage `json:"messages"`
	Turns    []convSummary `json:"turns"`
	Current  *convTurn     `json:"current"`
	Usage    tokenUsage    `json:"usage"`
}

type convMessage struct {
	Role       string         `json:"role"`
	Text       string         `json:"text"`
	ToolCalls  []convToolCall `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
	Name       string         `json:"name"`
	IsError    bool           `json:"is_error"`
	Turn       string         `json:"turn"`
}

type convToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type convSummary struct {
	ID      string     `json:"id"`
	From    string     `json:"from"`
	Started time.Time  `json:"started"`
	Ended   time.Time  `json:"ended"`
	Rounds  int        `json:"rounds"`
	Usage   tokenUsage `json:"usage"`
	Error   string     `json:"error"`
}

type convTurn struct {
	ID       string     `json:"id"`
	From     string     `json:"from"`
	Started  time.Time  `json:"started"`
	Deadline time.Time  `json:"deadline"`
	Rounds   int        `json:"rounds"`
	Usage    tokenUsage `json:"usage"`
}

type tokenUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

func (u tokenUsage) String() string {
	return fmt.Sprintf("tokens %d in, %d out", u.InputTokens, u.OutputTokens)
}

func cmdConversation(g *globals, name string, args []string) error {
	var full *bool
	agent, err := oneAgent(g, name, args, func(fs *flag.FlagSet) {
		full = fs.Bool("full", false, "print tool arguments and results whole (else cut at 300 characters)")
	})
	if err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		if err := checkConversationSkill(ctx, c, agent); err != nil {
			return err
		}
		data, err := c.Conversations().Get(ctx, agent)
		if err != nil {
			return err
		}
		if g.output == "json" {
			fmt.Fprintf(g.stdout, "%s\n", data)
			return nil
		}
		var rec convRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return errs.New(codes.Internal, "the conversation of %s does not decode: %w", agent, err)
		}
		return printConversation(g.stdout, &rec, *full)
	})
}

// checkConversationSkill refuses, before anything is sent to it, an agent
// whose type declares no conversation skill (it is not a model agent):
// InvalidArgument. An agent type that the cluster does not host is left
// to the Ask (NotFound).
func checkConversationSkill(ctx context.Context, c *client.Client, agent string) error {
	typ, _, _ := strings.Cut(agent, ":")
	types, err := c.Admin().Types(ctx, "")
	if err != nil {
		return err
	}
	i := slices.IndexFunc(types, func(t client.AgentType) bool { return t.Name == typ })
	if i < 0 {
		return nil
	}
	if !slices.ContainsFunc(types[i].Skills, func(s client.Skill) bool { return s.Name == conversationSkill }) {
		return errs.New(codes.InvalidArgument, "%s is not a model agent: its type %s has no %s skill", agent, typ, conversationSkill)
	}
	return nil
}

// printConversation writes rec as text: each turn with its messages, the
// turn in progress marked running, then the totals.
func printConversation(w io.Writer, rec *convRecord, full bool) error {
	if len(rec.Messages) == 0 && rec.Current == nil {
		_, err := fmt.Fprintln(w, "none")
		return err
	}
	summaries := make(map[string]convSummary, len(rec.Turns))
	for _, s := range rec.Turns {
		summaries[s.ID] = s
	}
	clip := func(s string) string {
		if full {
			return s
		}
		return clipText(s, 300)
	}
	results := make(map[string]bool) // the tool calls that have a result
	for _, m := range rec.Messages {
		if m.Role == "tool" {
			results[m.ToolCallID] = true
		}
	}
	turn := ""
	for _, m := range rec.Messages {
		if m.Turn != turn {
			turn = m.Turn
			writeTurnHeader(w, rec, summaries, turn)
		}
		switch m.Role {
		case "user":
			writeIndented(w, "  user: ", m.Text)
		case "assistant":
			if m.Text != "" || len(m.ToolCalls) == 0 {
				writeIndented(w, "  model: ", m.Text)
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(w, "  model calls %s %s [%s]\n", c.Name, clip(flat(c.Arguments)), c.ID)
				if !results[c.ID] && rec.Current != nil && turn == rec.Current.ID {
					fmt.Fprintf(w, "  tool %s [%s]: (running)\n", c.Name, c.ID)
				}
			}
		case "tool":
			what := "tool " + m.Name + " [" + m.ToolCallID + "]"
			if m.IsError {
				what += " failed"
			}
			writeIndented(w, "  "+what+": ", clip(m.Text))
		default:
			writeIndented(w, "  "+m.Role+": ", m.Text)
		}
	}
	if rec.Current != nil && !slices.ContainsFunc(rec.Messages, func(m convMessage) bool { return m.Turn == rec.Current.ID }) {
		writeTurnHeader(w, rec, summaries, rec.Current.ID)
	}
	_, err := fmt.Fprintf(w, "total: %d turns ended, %s\n", len(rec.Turns), rec.Usage)
	return err
}

// writeTurnHeader writes the line that starts the turn id: when it ran,
// for whom, its model calls and tokens, and how it ended (or that it is
// running).
func writeTurnHeader(w io.Writer, rec *convRecord, summaries map[string]convSummary, id string) {
	if cur := rec.Current; cur != nil && cur.ID == id {
		fmt.Fprintf(w, "turn %s running since %s%s: %s, %s so far\n", id, localTime(cur.Started), byCaller(cur.From), modelCalls(cur.Rounds), cur.Usage)
		return
	}
	s, ok := summaries[id]
	if !ok {
		fmt.Fprintf(w, "turn %s\n", id) // its summary was trimmed
		return
	}
	outcome := "answered"
	if s.Error != "" {
		outcome = "failed: " + flat(s.Error)
	}
	fmt.Fprintf(w, "turn %s %s%s: %s, %s, %s\n", id, localTime(s.Started), byCaller(s.From), modelCalls(s.Rounds), s.Usage, outcome)
}

func localTime(t time.Time) string { return t.Local().Format(time.DateTime) }

func byCaller(caller string) string {
	if caller == "" {
		return ""
	}
	return " from " + caller
}

func modelCalls(n int) string {
	if n == 1 {
		return "1 model call"
	}
	return fmt.Sprintf("%d model calls", n)
}

// writeIndented writes prefix and text, the text's further lines indented
// under it.
func writeIndented(w io.Writer, prefix, text string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	fmt.Fprintf(w, "%s%s\n", prefix, lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintf(w, "    %s\n", l)
	}
}

// clipText cuts s after n characters, saying how much it left out.
func clipText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return fmt.Sprintf("%s... (%d more bytes; --full prints them)", s[:j], len(s)-j)
		}
		i++
	}
	return s
}
