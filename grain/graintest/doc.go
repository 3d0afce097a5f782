// Package graintest runs agents in a plain `go test`, in milliseconds,
// without a silo: an Env is a runtime in memory with the state store,
// reminders and topics a silo gives its agents, on a clock that moves only
// when the test calls Advance, and with stubbed neighbours for the agents
// the one under test asks.
//
//	func TestCounter(t *testing.T) {
//		env := graintest.New(t)
//		env.Register("Counter", NewCounter)
//		got, err := env.AskText(t.Context(), "Counter:c", "inc")
//		if err != nil || got != "1" {
//			t.Fatalf("inc = %q, %v", got, err)
//		}
//		env.Advance(time.Hour) // timers and reminders due meanwhile fire
//	}
//
// What runs is the real runtime: one turn at a time per agent, call-chain
// reentrancy, deadlines, typed skills checked against their schemas,
// idempotency keys, state with etags (Env.StateStore), timers and
// reminders (on the Env's clock: a reminder's tick is a ONE_WAY message,
// queued before Advance returns), and topics (published messages are kept;
// Env.Deliver hands them to the subscriptions they match, with retries and
// dead letters as on a silo, when the test says so), and the test's own
// client session, from which it asks (Env.Pushed keeps what agents push
// to it). A model agent (package llm) runs in an Env as any agent does,
// thinking with the scripted model of package llm/llmtest. What a silo
// adds around it (placement across silos, the gateway, access control
// between owners unless WithConfig sets an Authorizer, durability across
// restarts) is not part of an Env: test those with a cluster (see
// tests/testcluster in this repository).
package graintest
