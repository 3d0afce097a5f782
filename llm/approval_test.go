package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/graintest"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
)

// approvalEnv is a graintest host with Counter and a Helper whose
// Counter_add needs approval.
func approvalEnv(t *testing.T, limits llm.Limits, script ...llmtest.Step) (*graintest.Env, *llmtest.Server) {
	t.Helper()
	env := graintest.New(t)
	srv := llmtest.New(script...)
	t.Cleanup(srv.Close)
	env.Register("Counter", func(h grain.Host) (grain.Agent, error) {
		return &counter{n: grain.NewState[int](h)}, nil
	}, grain.TypeInfo{Skills: []grain.Skill{grain.TypedSkill[AddIn, AddOut]("add", "Add n to the total.")}})
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Approval = []string{"Counter_add"}
	def.Limits = limits
	registerHelper(t, env, def)
	return env, srv
}

// decide asks the Helper's decide skill.
func decide(ctx context.Context, env *graintest.Env, d llm.Decision) (llm.Decided, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return llm.Decided{}, err
	}
	r, err := env.Ask(ctx, "Helper:h", &grain.Message{MessageType: llm.SkillDecide, DataType: grain.JSONType, Data: data})
	if err != nil {
		return llm.Decided{}, err
	}
	var out llm.Decided
	return out, json.Unmarshal(r.Data, &out)
}

func total(t *testing.T, env *graintest.Env) string {
	t.Helper()
	data, _ := env.State("Counter:a")
	return string(data)
}

// A tool call that needs approval parks the turn: the caller is told what
// waits (input-required), nothing runs, the activation may end, a new
// request is refused; bad decisions change nothing; an approval with
// edited arguments runs the call with them and the turn ends; a second
// decision is refused; the caller's retry gets the answer.
func TestApprovalApproved(t *testing.T) {
	env, srv := approvalEnv(t, llm.Limits{},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 5)}},
		llmtest.Step{Text: "added"},
	)
	ctx := t.Context()
	r, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "add five", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	var req llm.ApprovalRequest
	if r.MessageType != llm.InputRequired || r.State["status"] != "input-required" || json.Unmarshal(r.Data, &req) != nil || len(req.Approvals) != 1 {
		t.Fatalf("reply %v, want an approval request", r)
	}
	ap := req.Approvals[0]
	if ap.Call.Name != "Counter_add" || ap.Decision != "" || !strings.HasPrefix(ap.ID, "Helper:tester:h/") || !strings.Contains(r.Message, ap.ID) {
		t.Fatalf("approval %+v (text %q)", ap, r.Message)
	}
	if got := total(t, env); got != "" {
		t.Fatalf("Counter's state %q before the approval, want none", got)
	}

	// The waiting turn holds nothing in memory: the activation ends, and
	// the next one finds it waiting.
	addr, _ := grain.Resolve("Helper:h", "tester")
	if was, err := env.Runtime.Deactivate(ctx, addr); err != nil || !was {
		t.Fatalf("deactivate: %v %v", was, err)
	}
	if _, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "something else"}); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ap.ID) {
		t.Fatalf("a new request while the turn waits: %v, want FailedPrecondition naming the approval", err)
	}
	r, err = env.Ask(ctx, "Helper:h", &grain.Message{MessageType: llm.SkillApprovals, DataType: grain.JSONType, Data: []byte("{}")})
	var waiting []llm.Approval
	if err != nil || json.Unmarshal(r.Data, &waiting) != nil || len(waiting) != 1 || waiting[0].ID != ap.ID {
		t.Fatalf("approvals: %v %v", r, err)
	}

	// Bad decisions: nothing changes.
	if _, err := decide(ctx, env, llm.Decision{ID: ap.ID + "x", Approve: true}); errs.Code(err) != codes.NotFound {
		t.Fatalf("unknown id: %v", err)
	}
	bad := map[string]any{"agent": "a", "input": map[string]any{"n": "seven"}}
	if _, err := decide(ctx, env, llm.Decision{ID: ap.ID, Approve: true, Arguments: bad}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("arguments off the schema: %v", err)
	}
	if c := conversationOf(t, env, "Helper:h"); c.Current == nil || c.Current.Approvals[0].Decision != "" {
		t.Fatalf("after bad decisions: %+v", c.Current)
	}

	edited := map[string]any{"agent": "a", "input": map[string]any{"n": 7}}
	d, err := decide(ctx, env, llm.Decision{ID: ap.ID, Approve: true, Arguments: edited})
	if err != nil || d.Decision != llm.Approved || d.ID != ap.ID {
		t.Fatalf("approve: %+v %v", d, err)
	}
	c := conversationOf(t, env, "Helper:h") // after the turn, which runs next
	if c.Current != nil || len(c.Decisions) != 1 {
		t.Fatalf("after the approval: current %+v, decisions %+v", c.Current, c.Decisions)
	}
	if dec := c.Decisions[0]; dec.By != "tester" || dec.Decision != llm.Approved || !strings.Contains(dec.Original, `"n": 5`) || !strings.Contains(dec.Call.Arguments, `"n":7`) {
		t.Fatalf("recorded decision %+v", dec)
	}
	if got := total(t, env); got != "7" {
		t.Fatalf("Counter's total %q, want 7 (the edited arguments)", got)
	}
	if reqs := srv.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].LastMessage().Text, `"total":7`) {
		t.Fatalf("the model's requests: %+v", reqs)
	}
	if _, err := decide(ctx, env, llm.Decision{ID: ap.ID, Approve: false}); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second decision: %v, want FailedPrecondition", err)
	}
	if got, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "add five", IdempotencyKey: "k"}); err != nil || got.Message != "added" {
		t.Fatalf("the caller's retry: %v %v", got, err)
	}
}

// A denial is the call's result, with its reason; an approval whose
// deadline passes is denied, or approved if the definition says so; the
// turn's own timeout does not run while it waits.
func TestApprovalDeniedAndTimedOut(t *testing.T) {
	t.Run("denied", func(t *testing.T) {
		env, srv := approvalEnv(t, llm.Limits{},
			llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 5)}},
			llmtest.Step{Text: "not added"},
		)
		ctx := t.Context()
		ap := parked(t, env)
		if _, err := decide(ctx, env, llm.Decision{ID: ap.ID, Reason: "too much"}); err != nil {
			t.Fatal(err)
		}
		c := conversationOf(t, env, "Helper:h")
		if c.Current != nil || len(c.Decisions) != 1 || c.Decisions[0].Decision != llm.Denied || c.Decisions[0].Reason != "too much" {
			t.Fatalf("after the denial: %+v %+v", c.Current, c.Decisions)
		}
		if got := total(t, env); got != "" {
			t.Fatalf("Counter's state %q after a denial", got)
		}
		if reqs := srv.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].LastMessage().Text, "denied by tester: too much") {
			t.Fatalf("the model's requests: %+v", reqs)
		}
	})
	for _, approve := range []bool{false, true} {
		name := map[bool]string{false: "timed out", true: "approved on timeout"}[approve]
		t.Run(name, func(t *testing.T) {
			env, srv := approvalEnv(t, llm.Limits{Timeout: llm.Duration(time.Minute), ApprovalTimeout: llm.Duration(2 * time.Hour), ApproveOnTimeout: approve},
				llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 5)}},
				llmtest.Step{Text: "done"},
			)
			parked(t, env)
			env.Advance(time.Hour)
			if c := conversationOf(t, env, "Helper:h"); c.Current == nil || len(c.Current.Approvals) != 1 || c.Current.Approvals[0].Decision != "" {
				t.Fatalf("an hour on, before the deadline: %+v", c.Current)
			}
			env.Advance(time.Hour) // the reminder set to the deadline fires
			c := conversationOf(t, env, "Helper:h")
			if c.Current != nil || len(c.Turns) != 1 || c.Turns[0].Error != "" || len(c.Decisions) != 1 || c.Decisions[0].By != "" {
				t.Fatalf("after the deadline: current %+v, turns %+v, decisions %+v", c.Current, c.Turns, c.Decisions)
			}
			want, total0 := llm.Denied, ""
			if approve {
				want, total0 = llm.Approved, "5"
			}
			if c.Decisions[0].Decision != want || total(t, env) != total0 {
				t.Fatalf("decision %+v, Counter %q; want %s, %q", c.Decisions[0], total(t, env), want, total0)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Fatalf("%d model requests, want 2", n)
			}
		})
	}
}

// parked asks the Helper to add and returns the approval its turn waits
// for.
func parked(t *testing.T, env *graintest.Env) llm.Approval {
	t.Helper()
	r, err := env.Ask(t.Context(), "Helper:h", &grain.Message{Message: "add five"})
	var req llm.ApprovalRequest
	if err != nil || r.MessageType != llm.InputRequired || json.Unmarshal(r.Data, &req) != nil || len(req.Approvals) != 1 {
		t.Fatalf("reply %v %v, want an approval request", r, err)
	}
	return req.Approvals[0]
}

// Only the agent's owner, or a principal the ACL grants Approve, decides;
// an approval list naming no tool of the
// agent is refused when the turn builds its tools.
func TestApprovalRefusals(t *testing.T) {
	srv := llmtest.New(
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 1)}},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 1)}},
		llmtest.Step{Text: "denied, then"},
	)
	defer srv.Close()
	def := definition(llm.ProviderOpenAI, srv.OpenAIURL())
	def.Approval = []string{"Counter_add"}
	e := start(t, def, envConfig{})
	ctx := t.Context()
	r, err := e.ask(ctx, "Helper:alice:h", "add one", "")
	if err != nil || r.MessageType != llm.InputRequired {
		t.Fatalf("%v %v", r, err)
	}
	var req llm.ApprovalRequest
	if err := json.Unmarshal(r.Data, &req); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(llm.Decision{ID: req.Approvals[0].ID, Approve: true})
	_, err = e.rt.Ask(ctx, &grain.Message{From: "Session:bob:s", To: "Helper:alice:h", MessageType: llm.SkillDecide, DataType: grain.JSONType, Data: data})
	if errs.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob decides alice's approval: %v", err)
	}

	// With an ACL that grants carol Approve on the agent, carol decides.
	e3 := start(t, def, envConfig{authorizer: approver{}})
	r, err = e3.ask(ctx, "Helper:alice:h3", "add one", "")
	if err != nil || json.Unmarshal(r.Data, &req) != nil {
		t.Fatalf("%v %v", r, err)
	}
	for _, p := range []string{"bob", "carol"} {
		data, _ = json.Marshal(llm.Decision{ID: req.Approvals[0].ID})
		_, err = e3.rt.Ask(ctx, &grain.Message{From: "Session:" + p + ":s", To: "Helper:alice:h3", MessageType: llm.SkillDecide, DataType: grain.JSONType, Data: data})
		if want := map[string]codes.Code{"bob": codes.PermissionDenied, "carol": codes.OK}[p]; errs.Code(err) != want {
			t.Fatalf("%s decides: %v, want %v", p, err, want)
		}
	}

	def.Type, def.Approval = "Other", []string{"Counter_remove"}
	e2 := start(t, def, envConfig{})
	if _, err := e2.ask(ctx, "Other:alice:o", "add one", ""); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "approval[0]: Counter_remove is not one of the agent's tools") {
		t.Fatalf("an approval list naming no tool: %v", err)
	}
}

// A request that carries an InputRequired reply's state back answers its
// approvals (as an A2A client's next message on the task does): a text
// that is neither approve nor deny changes nothing; "approve" runs the
// call, and the request's reply is the turn's answer.
func TestApprovalAnsweredInReply(t *testing.T) {
	env, _ := approvalEnv(t, llm.Limits{},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 2)}},
		llmtest.Step{Text: "added two"},
	)
	ctx := t.Context()
	r, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "add two"})
	if err != nil || r.MessageType != llm.InputRequired || r.State[llm.StateApproval] == "" {
		t.Fatalf("%v %v", r, err)
	}
	carried := r.State
	if _, err := env.Ask(ctx, "Helper:h", &grain.Message{Message: "maybe later", State: carried}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("an answer that is no decision: %v", err)
	}
	if c := conversationOf(t, env, "Helper:h"); c.Current == nil || c.Current.Approvals[0].Decision != "" {
		t.Fatalf("after an answer that is no decision: %+v", c.Current)
	}
	r, err = env.Ask(ctx, "Helper:h", &grain.Message{Message: "Approve.", State: carried})
	if err != nil || r.Message != "added two" {
		t.Fatalf("approve: %v %v", r, err)
	}
	if got := total(t, env); got != "2" {
		t.Fatalf("Counter's total %q, want 2", got)
	}
}

// Approve and deny sent at once: one wins, the other is refused
// (FailedPrecondition), and the call runs as the winner says.
func TestApprovalRace(t *testing.T) {
	env, _ := approvalEnv(t, llm.Limits{},
		llmtest.Step{ToolCalls: []llmtest.ToolCall{addCall("c1", "a", 3)}},
		llmtest.Step{Text: "done"},
	)
	ap := parked(t, env)
	errc := make(chan error, 2)
	for _, approve := range []bool{true, false} {
		go func() {
			_, err := decide(t.Context(), env, llm.Decision{ID: ap.ID, Approve: approve})
			errc <- err
		}()
	}
	var refused int
	for range 2 {
		if err := <-errc; err != nil {
			if errs.Code(err) != codes.FailedPrecondition {
				t.Fatalf("the loser's error: %v, want FailedPrecondition", err)
			}
			refused++
		}
	}
	c := conversationOf(t, env, "Helper:h")
	if refused != 1 || len(c.Decisions) != 1 {
		t.Fatalf("%d refused, decisions %+v; want one of two", refused, c.Decisions)
	}
	want := map[string]string{llm.Approved: "3", llm.Denied: ""}[c.Decisions[0].Decision]
	if got := total(t, env); got != want {
		t.Fatalf("decided %s, Counter %q; want %q", c.Decisions[0].Decision, got, want)
	}
}

// approver is an ACL that lets anyone message anyone and grants carol
// Approve on every agent.
type approver struct{}

func (approver) AuthorizeMessage(context.Context, string, grain.Address) error { return nil }

func (approver) AuthorizePermission(_ context.Context, principal string, _ grain.Address, permission string) error {
	if principal == "carol" && permission == "Approve" {
		return nil
	}
	return errs.New(codes.PermissionDenied, "%s does not hold %s", principal, permission)
}
