package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/examples/internal/exampletest"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// TestGreeter runs the program and asks Greeter twice, as the README's
// commands do (greeter:run).
func TestGreeter(t *testing.T) {
	block := testutil.DocBlock(t, "examples/greeter/README.md", "greeter:run")
	if !strings.Contains(block, "go run ./examples/greeter &") || !strings.Contains(block, "ask Greeter:g world      # hello, world (greeting 1)") {
		t.Fatalf("examples/greeter/README.md greeter:run: %q", block)
	}
	p := exampletest.Start(t, nil)
	c, err := client.Dial(t.Context(), []string{p.Gateway}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, want := range []string{"hello, world (greeting 1)", "hello, world (greeting 2)"} {
		r, err := c.Ask(t.Context(), "Greeter:g", &client.Message{Message: "world"})
		if err != nil || r.Message != want {
			t.Fatalf("ask %d: %v, %v; want %q", i, r, err, want)
		}
	}
}

// TestGreeterUnit tests the agent alone, in memory, without a silo
// (package graintest).
func TestGreeterUnit(t *testing.T) {
	env := graintest.New(t)
	env.Register("Greeter", func(grain.Host) (grain.Agent, error) { return &Greeter{}, nil })
	for i, want := range []string{"hello, world (greeting 1)", "hello, world (greeting 2)"} {
		if got, err := env.AskText(t.Context(), "Greeter:g", "world"); err != nil || got != want {
			t.Fatalf("ask %d = %q, %v; want %q", i, got, err, want)
		}
	}
	if got, err := env.AskText(t.Context(), "Greeter:other", "you"); err != nil || got != "hello, you (greeting 1)" {
		t.Fatalf("another greeter = %q, %v: each agent counts its own", got, err)
	}
}
