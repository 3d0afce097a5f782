package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/pgtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The environment of a silo built with the test hooks that holds a model
// agent's turn after it records a step (llm/steps_testhooks.go).
const (
	llmHoldEnv     = "AGENTSILO_LLM_HOLD"
	llmHoldFileEnv = "AGENTSILO_LLM_HOLD_FILE"
)

// loopKill is where the silo running a model agent's turn is killed.
type loopKill struct {
	name string
	// hold is the step the turn is held after (AGENTSILO_LLM_HOLD), or ""
	// to hold the tool call itself (Tally's hold, until the test releases
	// it).
	hold string
}

var loopKills = []loopKill{
	{"model-recorded", "model"}, // the model's tool call recorded, the call not started
	{"tool-running", ""},        // the tool call running on another silo
	{"tool-recorded", "tool"},   // the tool's result recorded, the next model call not made
}

// TestDeclaredTypeLoopSurvivesKill is the durability the model loop
// promises, with real processes, at each kind of step and on each state
// store: a declared type whose tool is the typed skill add of the test
// agent Tally (a count in the state store, added to once per idempotency
// key); the fake model calls it once, then answers with its result. The
// silo running the loop is killed (kill -9) after the model's tool call
// is recorded, while the tool call runs on another silo, or after the
// tool's result is recorded; the SDK's retry of the keyed Ask (or the
// test's, with the same key) resumes the turn on another silo. The tool's
// side effect happens once (the count is 1, one add in Tally's journal),
// no model step in the record was requested twice (the fake model's log
// against the record), and the caller gets the one answer.
func TestDeclaredTypeLoopSurvivesKill(t *testing.T) {
	for _, store := range []string{"etcd", "postgres"} {
		t.Run(store, func(t *testing.T) {
			stateStore := ""
			if store == "postgres" {
				stateStore = pgtest.Start(t) // one server for the three: each case has agents of its own
			}
			for i, k := range loopKills {
				t.Run(k.name, func(t *testing.T) { loopSurvivesKill(t, stateStore, k, i) })
			}
		})
	}
}

func loopSurvivesKill(t *testing.T, stateStore string, k loopKill, n int) {
	args := `{"agent": "%s", "input": {"n": 1, "hold": %t}}`
	holdFile := filepath.Join(t.TempDir(), "held")
	t.Setenv(llmHoldEnv, k.hold)
	t.Setenv(llmHoldFileEnv, holdFile)
	opts := testcluster.Options{Silos: 3, Args: []string{"--llm-allow-private-networks"}}
	if stateStore != "" {
		opts.Args = append(opts.Args, "--state-store", stateStore)
	}
	c := testcluster.Start(t, opts)

	// The loop's agent and the tool's on different silos; the caller's
	// gateway on the third. Aliases of their own per case, as the cases
	// on PostgreSQL share its database.
	names := c.Names()
	loop := fmt.Sprintf("Looper:test:l%d", n)
	loopSilo := slices.Index(names, c.Owner(loop))
	var tool, toolAlias string
	for i := 0; tool == "" || c.Owner(tool) == names[loopSilo]; i++ {
		toolAlias = fmt.Sprintf("t%d-%d", n, i)
		tool = "Tally:test:" + toolAlias
	}
	toolSilo := slices.Index(names, c.Owner(tool))
	via := 3 - loopSilo - toolSilo
	t.Logf("loop %s on %s, tool %s on %s, caller through %s", loop, names[loopSilo], tool, names[toolSilo], names[via])

	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Tally_add", Arguments: fmt.Sprintf(args, toolAlias, k.hold == "")}.Respond)
	defer srv.Close()
	def := fmt.Sprintf(`type: Looper
description: Adds to a tally when asked.
model: {provider: openai, base_url: %s, name: fake-1}
tools:
  - agent: Tally
`, srv.OpenAIURL())
	admin := dialAs(t, c, "system")
	if a, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil || len(a.Unconfirmed) != 0 {
		t.Fatalf("apply: %+v, %v", a, err)
	}
	sdk := c.Client(t, via, toolSilo)

	key := "add-one-" + k.name
	type answer struct {
		r   *client.Message
		err error
	}
	first := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := sdk.Ask(ctx, loop, &client.Message{Message: "add one", IdempotencyKey: key})
		first <- answer{r, err}
	}()
	tallyJournal := c.Journal() + ".tally"
	tallyLines := func(event string) int {
		b, _ := os.ReadFile(tallyJournal)
		n := 0
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, event+" "+tool+" ") {
				n++
			}
		}
		return n
	}
	if k.hold == "" {
		testutil.WaitFor(t, "the tool call holding in Tally", func() bool { return tallyLines("hold") > 0 })
	} else {
		testutil.WaitFor(t, "the turn held after its "+k.hold+" step", func() bool {
			_, err := os.Stat(holdFile)
			return err == nil
		})
		held := strings.Fields(string(mustRead(t, holdFile)))
		if want := fmt.Sprint(c.PID(loopSilo)); len(held) != 2 || held[0] != k.hold || held[1] != want {
			t.Fatalf("held: %q; want %s held by %s (pid %s)", held, k.hold, names[loopSilo], want)
		}
	}
	before := readRecord(t, sdk, loop)
	wantBefore := map[string][]string{
		"model-recorded": {"user", "assistant"},
		"tool-running":   {"user", "assistant"},
		"tool-recorded":  {"user", "assistant", "tool"},
	}[k.name]
	if got := roles(before); !slices.Equal(got, wantBefore) || before.Current == nil {
		t.Fatalf("the loop's record before the kill: %v (current %v); want %v, unfinished", got, before.Current, wantBefore)
	}
	if got, want := tallyLines("add"), len(wantBefore)-2; got != want {
		t.Fatalf("Tally's adds before the kill: %d; want %d", got, want)
	}
	// The audit holds a record of the tool call once it ran and its
	// result is recorded, and none before (docs/audit.md).
	if got, want := toolRecords(t, admin, loop), len(wantBefore)-2; got != want {
		t.Fatalf("audit records of the tool call before the kill: %d; want %d", got, want)
	}
	c.Kill(loopSilo)
	killed := time.Now()
	c.WaitGone(names[loopSilo])
	if k.hold == "" {
		if err := os.WriteFile(tallyJournal+".release", nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The keyed Ask is sent again to the loop's new silo, with its key,
	// by the SDK (its call may have run) or, failing that, by the test:
	// either way the turn resumes where its record stands.
	a := <-first
	t.Logf("the Ask whose loop's silo was killed: %+v, %v (%v after the kill)", a.r, a.err, time.Since(killed).Round(time.Millisecond))
	if a.err != nil {
		a.r, a.err = sdk.Ask(t.Context(), loop, &client.Message{Message: "add one", IdempotencyKey: key})
	}
	const want = `done: {"count":1}`
	if a.err != nil || a.r.Message != want {
		t.Fatalf("the answer: %+v, %v; want %q", a.r, a.err, want)
	}
	// The one answer, again, without a model call.
	served := srv.Served()
	if r, err := sdk.Ask(t.Context(), loop, &client.Message{Message: "add one", IdempotencyKey: key}); err != nil || r.Message != want || srv.Served() != served {
		t.Errorf("the same key again: %+v, %v, %d model requests more; want the answer and none", r, err, srv.Served()-served)
	}

	count, err := sdk.Ask(t.Context(), tool, &client.Message{MessageType: "count", DataType: "application/json", Data: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	adds := tallyLines("add")
	rec := readRecord(t, sdk, loop)
	repeated, unrecorded := modelRepeats(srv.Requests(), rec)
	t.Logf("tool calls repeated: %d; recorded model steps requested again: %d; requests for no recorded step: %d (count %s, %d model requests)", adds-1, repeated, unrecorded, count.Data, srv.Served())
	if string(count.Data) != `{"count":1}` || adds != 1 {
		t.Errorf("Tally: count %s, %d adds in its journal:\n%s\nwant 1 and 1: the tool's side effect once", count.Data, adds, mustRead(t, tallyJournal))
	}
	if got := roles(rec); !slices.Equal(got, []string{"user", "assistant", "tool", "assistant"}) || rec.Current != nil || len(rec.Turns) != 1 || rec.Turns[0].Rounds != 2 {
		t.Errorf("the record after the turn: %v, current %v, turns %+v; want one turn of two rounds, ended", got, rec.Current, rec.Turns)
	}
	if got := toolRecords(t, admin, loop); got != 1 {
		t.Errorf("audit records of the tool call: %d; want 1: the side effect happened once", got)
	}
	if rep, err := admin.Audit().Verify(t.Context()); err != nil || !rep.OK {
		t.Errorf("audit verify: %+v, %v", rep, err)
	}
	if repeated != 0 || unrecorded != 0 || srv.Served() != 2 {
		t.Errorf("the model got %d requests, %d for a recorded step already asked, %d for no recorded step; want 2, 0, 0", srv.Served(), repeated, unrecorded)
	}
}

// readRecord reads a model agent's record from the state store.
func readRecord(t *testing.T, sdk *client.Client, addr string) llm.Conversation {
	t.Helper()
	st, err := sdk.Agents().State(t.Context(), addr)
	if err != nil {
		t.Fatalf("the state of %s: %v", addr, err)
	}
	var rec llm.Conversation
	if err := json.Unmarshal(st.Data, &rec); err != nil {
		t.Fatalf("the state of %s: %v\n%s", addr, err, st.Data)
	}
	return rec
}

func roles(rec llm.Conversation) []string {
	var r []string
	for _, m := range rec.Messages {
		r = append(r, m.Role)
	}
	return r
}

// modelRepeats compares the model's requests with the record: a request
// with k messages asked for the record's message k. It returns how many
// requests asked again for a recorded response, and how many asked for a
// message the record does not hold as a response (a step whose response
// was lost: none, when every kill came after a save).
func modelRepeats(reqs []fakemodel.Request, rec llm.Conversation) (repeated, unrecorded int) {
	asked := make(map[int]int)
	for _, r := range reqs {
		asked[len(r.Messages)]++
	}
	for i, n := range asked {
		if i < len(rec.Messages) && rec.Messages[i].Role == "assistant" {
			repeated += n - 1
		} else {
			unrecorded += n
		}
	}
	return repeated, unrecorded
}

// toolRecords counts the audit's tool call records of agent.
func toolRecords(t *testing.T, admin *client.Client, agent string) int {
	t.Helper()
	recs, err := admin.Audit().Records(t.Context(), client.AuditFilter{Agent: agent, Kind: "tool_call"})
	if err != nil {
		t.Fatalf("audit records of %s: %v", agent, err)
	}
	return len(recs)
}
