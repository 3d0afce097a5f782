package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentsilo/agentsilo/client"
)

// demo calls the demo agents through the silo's own gateway with the Go SDK,
// as a client would, and prints what happens.
func demo(ctx context.Context, gateway string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{gateway}, client.WithPrincipal("demo"),
		client.WithOnMessage(func(m *client.Message) {
			fmt.Fprintf(out, "    pushed by %s: %s\n", m.From, m.Message)
		}))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(out, "demo: a client session %s on %s\n", c.Address(), gateway)
	calls := []struct {
		to, text string
		state    map[string]string
	}{
		{"Echo:hello", "hi there", nil},
		{"Counter:visits", "", nil},
		{"Counter:visits", "add 41", nil},
		{"Progress:trip", "plan a trip", nil},
		{"Pipeline:p", "through two agents", nil},
		{"FanOut:f", "ping", map[string]string{"n": "3"}},
		{"Nope:x", "an unregistered type", nil},
	}
	for _, call := range calls {
		fmt.Fprintf(out, "  ask %s %q\n", call.to, call.text)
		r, err := c.Ask(ctx, call.to, &client.Message{Message: call.text, State: call.state})
		if err != nil {
			fmt.Fprintf(out, "    error: %v\n", err)
			continue
		}
		fmt.Fprintf(out, "    reply from %s: %s\n", r.From, r.Message)
	}
	fmt.Fprintf(out, "demo: done. Try: go run ./cmd/client --addr %s ask Echo:hello hi\n", gateway)
	return nil
}
