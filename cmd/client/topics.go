package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/client"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The topic commands: publish, subscribe, unsubscribe, subscriptions,
// deadletters (list, replay, drop), broadcast.

func cmdPublish(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	m := &client.Message{State: map[string]string{}}
	fs.StringVar(&m.MessageType, "type", "", "the message's `type`")
	fs.StringVar(&m.IdempotencyKey, "key", "", "idempotency `key`: published again within 10 minutes, it is queued once")
	data := addDataFlags(fs, m)
	fs.Var(pairs(m.State), "state", "state entry `k=v` (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s: want TOPIC TEXT", name)
	}
	withData, err := data.load()
	if err != nil {
		return err
	}
	if m.Message, err = g.messageText(name, pos[1:], withData); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		r, err := c.Topics().Publish(ctx, pos[0], m)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.PublishResponse{Id: r.ID, Subscriptions: uint32(r.Subscriptions), Duplicate: r.Duplicate})
			return nil
		}
		if r.Duplicate {
			fmt.Fprintf(g.stdout, "%s (published already; not queued again)\n", r.ID)
			return nil
		}
		fmt.Fprintf(g.stdout, "%s (queued for %d subscriptions)\n", r.ID, r.Subscriptions)
		return nil
	})
}

func cmdSubscribe(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	maxAttempts := fs.Int("max-attempts", 0, "deliveries of a message before it becomes a dead letter (default 5)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 1:
		return subscribeSession(g, pos[0], *maxAttempts)
	case 3:
	default:
		return usagef("%s: want PATTERN (this session), or AGENT NAME PATTERN", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		s, err := c.Topics().Subscribe(ctx, pos[0], pos[1], pos[2], client.MaxAttempts(*maxAttempts))
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, wireSubscription(s))
			return nil
		}
		fmt.Fprintf(g.stdout, "subscribed %s to %s (%s, %d attempts)\n", pos[0], s.ID, s.Pattern, s.MaxAttempts)
		return nil
	})
}

// subscribeSession subscribes a session of its own to pattern and prints
// what it gets until interrupted; the subscription ends with the session.
func subscribeSession(g *globals, pattern string, maxAttempts int) error {
	if maxAttempts != 0 {
		return usagef("subscribe PATTERN: --max-attempts is for an agent's subscription (a session's is acknowledged once in its backlog)")
	}
	ctx, stop := signalContext()
	defer stop()
	c, err := g.dial(ctx, client.WithOnMessage(func(m *client.Message) {
		if g.output == "json" {
			g.printMessage(g.stdout, m)
			return
		}
		fmt.Fprintf(g.stdout, "%s %s: %s\n", m.Topic, m.From, shownText(m))
	}))
	if err != nil {
		return err
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	s, err := c.Topics().SubscribeSession(sctx, pattern)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "subscribed %s to %s as %s (interrupt to stop)\n", c.Address(), s.Pattern, s.ID)
	<-ctx.Done()
	return nil
}

func cmdUnsubscribe(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("%s: want AGENT NAME", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		deleted, err := c.Topics().Unsubscribe(ctx, pos[0], pos[1])
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.UnsubscribeResponse{Deleted: deleted})
			return nil
		}
		if deleted {
			fmt.Fprintf(g.stdout, "unsubscribed %s from %s; it was the last: the subscription is deleted\n", pos[0], pos[1])
		} else {
			fmt.Fprintf(g.stdout, "unsubscribed %s from %s\n", pos[0], pos[1])
		}
		return nil
	})
}

func cmdSubscriptions(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	owner := fs.String("owner", "", "the subscriptions of this `owner` (default: yours)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		subs, err := c.Topics().Subscriptions(ctx, *owner)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printList(&agentsilov1.ListSubscriptionsResponse{Subscriptions: wireSubscriptions(subs)})
			return nil
		}
		return g.table("SUBSCRIPTION\tPATTERN\tMAX ATTEMPTS\tMEMBERS", len(subs), func(w io.Writer, i int) {
			s := subs[i]
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", s.ID, s.Pattern, s.MaxAttempts, strings.Join(s.Members, ","))
		})
	})
}

func cmdDeadLetters(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	after := fs.String("after", "", "list after this dead letter `id` (the last of the previous page)")
	limit := fs.Int("limit", 100, "list at most `N` (up to 1000)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: want SUBSCRIPTION", name)
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit %d: want 1 to 1000", *limit)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		page, err := c.Topics().DeadLetters(ctx, pos[0], client.After(*after), client.Limit(*limit))
		if err != nil {
			return err
		}
		ds, more := page.Items, page.Next != ""
		if g.output == "json" {
			g.printList(&agentsilov1.ListDeadLettersResponse{DeadLetters: wireDeadLetters(ds), More: more})
			return nil
		}
		err = g.table("ID\tTOPIC\tATTEMPTS\tDEAD AT\tREASON\tLAST ERROR\tMESSAGE", len(ds), func(w io.Writer, i int) {
			d := ds[i]
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", d.ID, d.Message.Topic, d.Attempts,
				d.DeadAt.Local().Format(time.DateTime), oneLine(d.Reason), oneLine(d.LastError), oneLine(d.Message.Message))
		})
		if err == nil && more {
			fmt.Fprintf(g.stderr, "more: --after %s\n", page.Next)
		}
		return err
	})
}

// oneLine keeps a table cell on one line and short.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	if s == "" {
		return "-"
	}
	return s
}

// cmdDeadLetterAction runs deadletters replay and deadletters drop.
func cmdDeadLetterAction(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	all := fs.Bool("all", false, "every dead letter of the subscription")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("%s: want SUBSCRIPTION ID... or SUBSCRIPTION --all", name)
	case *all && len(pos) > 1:
		return usagef("%s: give ids or --all, not both", name)
	case !*all && len(pos) == 1:
		return usagef("%s: which dead letters? give their ids, or --all", name)
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		var n int
		var err error
		verb := "replayed"
		if strings.HasSuffix(name, "drop") {
			verb = "dropped"
			n, err = c.Topics().DropDeadLetters(ctx, pos[0], pos[1:]...)
		} else {
			n, err = c.Topics().ReplayDeadLetters(ctx, pos[0], pos[1:]...)
		}
		if err != nil {
			return err
		}
		if g.output == "json" {
			fmt.Fprintf(g.stdout, "{\"count\":%d}\n", n)
			return nil
		}
		fmt.Fprintf(g.stdout, "%s %d dead letters of %s\n", verb, n, pos[0])
		return nil
	})
}

func cmdBroadcast(g *globals, name string, args []string) error {
	fs := newFlagSet(name, g)
	m := &client.Message{}
	event := fs.Bool("event", false, "send it as an event (OnEvent)")
	fs.StringVar(&m.MessageType, "type", "", "the message's `type`")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s: want PATTERN TEXT", name)
	}
	if m.Message, err = g.text(name, pos[1:]); err != nil {
		return err
	}
	if *event {
		m.Kind = client.KindEvent
	}
	return g.with(func(ctx context.Context, c *client.Client) error {
		n, err := c.Topics().Broadcast(ctx, pos[0], m)
		if err != nil {
			return err
		}
		if g.output == "json" {
			g.printJSON(g.stdout, &agentsilov1.BroadcastResponse{Reached: uint32(n)})
			return nil
		}
		fmt.Fprintf(g.stdout, "reached %d agents\n", n)
		return nil
	})
}
