package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/examples/internal/exampletest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.LeakOptions()...) }

// TestFanOut runs the program and asks Planner as the README's fanout:run
// does: the report holds every researcher's finding, and each stage is an
// activation of its own.
func TestFanOut(t *testing.T) {
	block := testutil.DocBlock(t, "examples/fanout/README.md", "fanout:run")
	if !strings.Contains(block, "go run ./examples/fanout &") || !strings.Contains(block, `ask Planner:p "a trip to Rome"`) {
		t.Fatalf("examples/fanout/README.md fanout:run: %q", block)
	}
	p := exampletest.Start(t, nil)
	c, err := client.Dial(t.Context(), []string{p.Gateway}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Ask(t.Context(), "Planner:p", &client.Message{Message: "a trip to Rome"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "report (3 findings): food of a trip to Rome: noted; museums of a trip to Rome: noted; weather of a trip to Rome: noted"; r.Message != want {
		t.Errorf("Planner answered %q, want %q", r.Message, want)
	}
	agents, err := c.Agents().List(t.Context(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range agents {
		got = append(got, a.Address)
	}
	for _, want := range []string{"Planner:dev:p", "Researcher:dev:food", "Researcher:dev:museums", "Researcher:dev:weather", "Writer:dev:w"} {
		if !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("activations %v lack %s", got, want)
		}
	}
}
