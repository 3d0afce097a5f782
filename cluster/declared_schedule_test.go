package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/llm"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
)

// TestDeclaredSchedule: applying a declared type registers the durable
// reminders of its schedule (an entry without an owner is the applier's,
// written into the stored definition); applying it again keeps them as
// they are; a replaced definition's entries that are gone lose theirs;
// deleting the type removes the rest.
func TestDeclaredSchedule(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	s := declaredSilo(t, e, "/llmschedule/", "s0", grain.NewRegistry(), "--llm-allow-private-networks")
	defer closeSilo(t, s)
	admin := dialSilo(t, s, "system")
	defer admin.Close()
	ctx := t.Context()

	def := func(schedule string) []byte {
		return fmt.Appendf(nil, "type: Helper\nmodel: {provider: openai, base_url: http://127.0.0.1:1/v1, name: fake-1}\nschedule:\n%s", schedule)
	}
	hourly := "  - {every: 1h, message: check the open orders}\n"
	morning := "  - {cron: \"0 7 * * 1-5 Europe/Rome\", message: good morning, alias: am, owner: ops}\n"
	mine := grain.Address{Type: "Helper", Owner: "system", Alias: llm.DefaultScheduleAlias}
	ops := grain.Address{Type: "Helper", Owner: "ops", Alias: "am"}
	reminders := func(a grain.Address) []grain.Reminder {
		t.Helper()
		rs, err := s.reminders.List(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}

	applied, err := admin.Admin().ApplyType(ctx, def(hourly+morning))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(applied.Type.Definition, `"owner":"system"`) {
		t.Errorf("the stored definition does not name the applier as the entry's owner: %s", applied.Type.Definition)
	}
	first, am := reminders(mine), reminders(ops)
	if len(first) != 1 || !strings.HasPrefix(first[0].Name, llm.ScheduleType+".") || len(am) != 1 {
		t.Fatalf("reminders: %+v of %s, %+v of %s; want one each", first, mine, am, ops)
	}

	// The same definition again: unchanged, the reminders as they were.
	if again, err := admin.Admin().ApplyType(ctx, def(hourly+morning)); err != nil || !again.Unchanged {
		t.Fatalf("apply again: %+v, %v", again, err)
	}
	if got := reminders(mine); len(got) != 1 || !got[0].Due.Equal(first[0].Due) {
		t.Errorf("after applying the same: %+v, want %+v", got, first)
	}

	// A changed entry is another reminder; a gone one's is removed.
	if _, err := admin.Admin().ApplyType(ctx, def("  - {every: 2h, message: check the open orders}\n")); err != nil {
		t.Fatal(err)
	}
	if got := reminders(mine); len(got) != 1 || got[0].Name == first[0].Name || got[0].Period != 2*60*60*1e9 {
		t.Errorf("after the change: %+v (before: %+v)", got, first)
	}
	if got := reminders(ops); len(got) != 0 {
		t.Errorf("the gone entry's reminder stays: %+v", got)
	}

	// A schedule entry that names no owner needs an applier who is one.
	bad := def("  - {every: 1h, message: hi, owner: \"not an owner\"}\n")
	if _, err := admin.Admin().ApplyType(ctx, bad, client.DryRun()); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "schedule[0].owner") {
		t.Errorf("a bad owner: %v", err)
	}

	if _, err := admin.Admin().DeleteType(ctx, "Helper"); err != nil {
		t.Fatal(err)
	}
	if got := reminders(mine); len(got) != 0 {
		t.Errorf("after the delete: %+v", got)
	}
}

// TestDeclaredOwnerBudget: a silo's --llm-owner-daily-tokens gives a
// declared type without a budget one: the owner's turn that spent it is
// answered, the next refused with ResourceExhausted before the model is
// asked, and the owner's budget agent says what was spent.
func TestDeclaredOwnerBudget(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	e := etcdtest.Start(t)
	defer e.Stop()
	srv := fakemodel.New(fakemodel.Step{Text: "done", InputTokens: 80, OutputTokens: 30})
	defer srv.Close()
	s := declaredSilo(t, e, "/llmbudget/", "s0", grain.NewRegistry(), "--llm-allow-private-networks", "--llm-owner-daily-tokens", "100")
	defer closeSilo(t, s)
	admin := dialSilo(t, s, "system")
	defer admin.Close()
	def := fmt.Sprintf("type: Helper\nmodel: {provider: openai, base_url: %s, name: fake-1}\n", srv.OpenAIURL())
	if _, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil {
		t.Fatal(err)
	}
	alice := dialSilo(t, s, "alice")
	defer alice.Close()
	if r, err := alice.Ask(t.Context(), "Helper:a", &client.Message{Message: "one"}); err != nil || r.Message != "done" {
		t.Fatalf("first turn: %v, %v", r, err)
	}
	_, err := alice.Ask(t.Context(), "Helper:b", &client.Message{Message: "two"})
	if errs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the turn past the budget: %v, want ResourceExhausted", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
	usage, err := client.AskTyped[llm.BudgetQuery, llm.BudgetUsage](t.Context(), alice, llm.BudgetType+":"+llm.BudgetAlias, llm.SkillBudgetUsage, llm.BudgetQuery{})
	if err != nil || usage.Tokens != 110 {
		t.Errorf("alice's budget: %+v, %v; want 110 tokens", usage, err)
	}
	types, err := alice.Admin().Types(t.Context(), "")
	if err != nil || !slices.ContainsFunc(types, func(ty client.AgentType) bool { return ty.Name == llm.BudgetType }) {
		t.Errorf("types %+v, %v: want %s served", types, err, llm.BudgetType)
	}
}
