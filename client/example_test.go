package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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
