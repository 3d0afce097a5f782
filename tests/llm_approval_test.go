package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/llm"
	"github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestApprovalSurvivesRestart: a declared type whose tool, Tally's add,
// needs approval; the caller is told the turn waits; every silo process
// is stopped and started again; the owner approves on the
// new silos (listing with the CLI as the owner; a principal with the ACL's
// Message but not Approve refused; one with Approve approving with the
// CLI); the call runs once and the turn ends with its result, which
// the caller's retry of its key gets.
func TestApprovalSurvivesRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: []string{"--llm-allow-private-networks"}})
	srv := llmtest.NewFunc(llmtest.Loop{Tool: "Tally_add", Arguments: `{"agent": "ap", "input": {"n": 1}}`}.Respond)
	defer srv.Close()
	def := fmt.Sprintf(`type: Careful
description: Adds to a tally once a person says yes.
model: {provider: openai, base_url: %s, name: fake-1}
tools:
  - agent: Tally
approval: [Tally_add]
`, srv.OpenAIURL())
	admin := dialAs(t, c, "system")
	if a, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil || len(a.Unconfirmed) != 0 {
		t.Fatalf("apply: %+v, %v", a, err)
	}
	const agent, tool, key = "Careful:test:c", "Tally:test:ap", "add-carefully"
	sdk := c.Client(t)
	r, err := sdk.Ask(t.Context(), agent, &client.Message{Message: "add one", IdempotencyKey: key})
	var req llm.ApprovalRequest
	if err != nil || r.MessageType != llm.InputRequired || r.State["status"] != "input-required" || json.Unmarshal(r.Data, &req) != nil || len(req.Approvals) != 1 {
		t.Fatalf("the ask: %v %v; want the turn waiting for an approval", r, err)
	}
	id := req.Approvals[0].ID
	tallyAdds := func() int {
		b, _ := os.ReadFile(c.Journal() + ".tally")
		n := 0
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "add "+tool+" ") {
				n++
			}
		}
		return n
	}
	if n := tallyAdds(); n != 0 {
		t.Fatalf("Tally added %d times before the approval", n)
	}

	for i := range c.Len() {
		c.Stop(i)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	c.WaitMembers(c.Len())
	sdk = c.Client(t)
	if rec := readRecord(t, sdk, agent); rec.Current == nil || len(rec.Current.Approvals) != 1 || rec.Current.Approvals[0].ID != id {
		t.Fatalf("the record after the restart: %+v", rec.Current)
	}
	// The owner lists and approves with the CLI.
	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/client").CombinedOutput(); err != nil {
		t.Fatalf("build the client: %v\n%s", err, out)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"--addr", c.Silo(1).GatewayAddr, "--as", testcluster.Principal}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("approvals", agent); !strings.HasPrefix(out, id+"  Tally_add ") {
		t.Fatalf("client approvals: %q, want the approval %s", out, id)
	}
	// Who decides besides the owner: a principal the ACL grants Approve
	// on the agent (carol); Message alone (dave) is not enough.
	admin = dialAs(t, c, "system")
	for _, r := range []client.ACLRule{
		{OwnerPattern: testcluster.Principal, AgentPattern: "*", CallerPattern: "dave", Permission: "Message"},
		{OwnerPattern: testcluster.Principal, AgentPattern: "*", CallerPattern: "carol", Permission: "Message,Approve"},
	} {
		if _, err := admin.ACL().AddRule(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := json.Marshal(llm.Decision{ID: id, Approve: true})
	dave := dialAs(t, c, "dave")
	if _, err := dave.Ask(t.Context(), agent, &client.Message{MessageType: llm.SkillDecide, DataType: "application/json", Data: data}); errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Approve") {
		t.Fatalf("dave, with Message only, decides: %v; want PermissionDenied", err)
	}
	if out := cli("--as", "carol", "approvals", "approve", id); out != "approved "+id+" (turn "+req.Approvals[0].Turn+")\n" {
		t.Fatalf("client approvals approve: %q", out)
	}
	testutil.WaitFor(t, "the approved turn to end", func() bool { return readRecord(t, sdk, agent).Current == nil })
	const want = `done: {"count":1}`
	if r, err := sdk.Ask(t.Context(), agent, &client.Message{Message: "add one", IdempotencyKey: key}); err != nil || r.Message != want {
		t.Fatalf("the caller's retry: %+v %v; want %q", r, err, want)
	}
	if _, err := sdk.Ask(t.Context(), agent, &client.Message{MessageType: llm.SkillDecide, DataType: "application/json", Data: data}); err == nil || !strings.Contains(err.Error(), "decided already") {
		t.Fatalf("a second decision: %v", err)
	}
	rec := readRecord(t, sdk, agent)
	if n := tallyAdds(); n != 1 || len(rec.Decisions) != 1 || rec.Decisions[0].By != "carol" {
		t.Fatalf("Tally added %d times (want 1); decisions %+v", n, rec.Decisions)
	}
}
