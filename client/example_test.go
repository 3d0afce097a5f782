package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/agentsilo/agentsilo/client"
)

// The examples run against an in-process silo (newSilo, in client_test.go)
// with an Echo agent and a Progress agent that pushes to its caller.

func Example() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	reply, err := c.Ask(ctx, "Echo:one", &client.Message{Message: "hello"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.From, "says", reply.Message)
	// Output: Echo:alice:one says hello
}

func ExampleClient_Messages() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Progress pushes two messages to the caller's session, then replies.
	reply, err := c.Ask(ctx, "Progress:job-1", &client.Message{Message: "go"})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		m := <-c.Messages()
		fmt.Println("pushed:", m.Message)
	}
	fmt.Println("reply:", reply.Message)
	// Output:
	// pushed: p1
	// pushed: p2
	// reply: done
}

func ExampleClient_Ask_errors() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Ask(ctx, "NoSuchType:x", nil)
	fmt.Println(errors.Is(err, client.ErrNotFound))
	_, err = c.Ask(ctx, "not an address", nil)
	fmt.Println(errors.Is(err, client.ErrInvalidArgument))
	// Output:
	// true
	// true
}

// The listings return the SDK's own types: plain structs with time.Time
// and int fields, nothing of the wire's.
func ExampleAgents_List() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, to := range []string{"Echo:one", "Echo:two"} {
		if _, err := c.Ask(ctx, to, &client.Message{Message: "hi"}); err != nil {
			log.Fatal(err)
		}
	}
	agents, err := c.Agents().List(ctx, "alice", "Echo")
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range agents {
		fmt.Println(a.Address, a.MailboxDepth, !a.ActivatedAt.IsZero())
	}
	members, err := c.Admin().Members(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range members {
		fmt.Println(m.State, m.Self, m.Activations)
	}
	// Output:
	// Echo:alice:one 0 true
	// Echo:alice:two 0 true
	// alive true 2
}

func ExampleAdmin_Types() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	types, err := c.Admin().Types(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range types {
		fmt.Println(t.Name, len(t.Skills))
	}
	// Output:
	// Echo 0
	// Fail 0
	// Progress 0
	// Slow 0
}

// Deactivate says whether there was an activation to end.
func ExampleAgents_Deactivate() {
	s, err := newSilo()
	if err != nil {
		log.Fatal(err)
	}
	defer s.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, []string{s.addr}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.Ask(ctx, "Echo:one", &client.Message{Message: "hi"}); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		active, err := c.Agents().Deactivate(ctx, "Echo:one")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("was active:", active)
	}
	// Output:
	// was active: true
	// was active: false
}

// Publishing and subscribing need a silo with a topic store (any silo
// with etcd). This example is compiled, not run.
func ExampleTopics_Publish() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Inbox:alice:in competes for the messages of subscription alice:orders.
	sub, err := c.Topics().Subscribe(ctx, "Inbox:in", "orders", "orders.#", client.MaxAttempts(3))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("subscribed to", sub.ID, "with", sub.Pattern)

	r, err := c.Topics().Publish(ctx, "orders.created", &client.Message{Message: "order 42", IdempotencyKey: "order-42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ID, "queued for", r.Subscriptions, "subscriptions; a repeat:", r.Duplicate)

	// What its agents gave up on.
	dead, err := c.Topics().DeadLetters(ctx, "orders", client.Limit(100))
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead.Items {
		fmt.Println(d.ID, d.Message.Topic, d.Attempts, d.Reason, d.DeadAt.Format(time.RFC3339))
	}
	if dead.Next != "" {
		fmt.Println("more: client.After", dead.Next)
	}
}

// An operator (group admins, or Admin on system:acl) adds a rule and asks
// why a call is allowed. This example is compiled, not run.
func ExampleACL_Check() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithAPIKey("root-key"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// alice may message and read bob's shared-* agents.
	added, err := c.ACL().AddRule(ctx, client.ACLRule{OwnerPattern: "bob", AgentPattern: "shared-*", CallerPattern: "alice", Permission: "Message,Read"}, client.At(1))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rule", added.Rule.ID, "at", added.Position)

	d, err := c.ACL().Check(ctx, "alice", "Echo:bob:shared-1", "Message")
	if err != nil {
		log.Fatal(err)
	}
	if d.Rule != nil {
		fmt.Println(d.Allowed, d.Reason, d.Rule.ID, d.Position, d.Granted)
	} else {
		fmt.Println(d.Allowed, d.Reason) // "own agent" or "default deny"
	}
}

// The service directory ranks agent types, outside A2A agents and MCP
// servers together. This example is compiled, not run.
func ExampleDirectory_Search() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithPrincipal("alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// An outside A2A agent, with a credential it is sent (never shown).
	if _, err := c.Directory().Add(ctx, client.OutsideEntry{
		Name: "weather", Kind: "a2a", URL: "https://weather.example.com",
		Headers: map[string]string{"Authorization": "Bearer " + "token"},
	}); err != nil {
		log.Fatal(err)
	}
	hits, err := c.Directory().Search(ctx, "weather forecast", client.DirectoryQuery{}, client.Limit(5))
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range hits {
		fmt.Printf("%.2f %s %s: call %s\n", h.Score, h.Entry.Kind, h.Entry.Name, h.Entry.Call)
		for _, sk := range h.Entry.Skills {
			fmt.Println("  skill", sk.Name, sk.Tags)
		}
	}
}
