package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestLabelsAcrossSilos: content labels (docs/trust.md) on three silo
// processes, with LabelProbe agents (a test type that says which label it
// got and asks another agent on the way) placed on the second and third
// silos, reached through the first. Through the gateway (the Go SDK): a
// client's message is user-input, what the agent sends on agent-message;
// a client may lower its label (tool-output, outside), which the
// agents' messages and replies keep across the silos; a client that
// claims system is refused with PermissionDenied, a label this version
// does not know with InvalidArgument. Through A2A (a2a-go, and the
// JavaScript SDK in tests/a2ajs): a message is an agent-message from
// outside the cluster, a part may claim a lower label (a higher claim
// counts for nothing), the reply's parts carry theirs. Through MCP (the
// TypeScript SDK in tests/mcpjs): a call is a tool-request from outside,
// it may claim a lower label in _meta, the result's _meta carries the
// reply's.
func TestLabelsAcrossSilos(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, A2A: true, MCP: true})
	names := c.Names()
	// placed returns an alias of owner's whose LabelProbe agent the
	// silo i hosts.
	placed := func(owner, prefix string, i int) string {
		for n := range 1000 {
			alias := fmt.Sprintf("%s%d", prefix, n)
			if c.Owner("LabelProbe:"+owner+":"+alias) == names[i] {
				return alias
			}
		}
		t.Fatalf("no alias of %s placed on %s", owner, names[i])
		return ""
	}
	probe := func(owner, alias string) string { return "LabelProbe:" + owner + ":" + alias }

	// The gateway, on the first silo.
	p1, p2 := placed(testcluster.Principal, "p", 1), placed(testcluster.Principal, "p", 2)
	sdk := dialAs(t, c, testcluster.Principal, 0)
	for _, tc := range []struct {
		name  string
		msg   *client.Message
		got   string
		label grain.Label
	}{
		{"unlabelled", &client.Message{}, "user-input | %s got agent-message (reply agent-message)", grain.LabelAgentMessage},
		{"lowered", &client.Message{Label: grain.LabelToolOutput}, "tool-output | %s got tool-output (reply tool-output)", grain.LabelToolOutput},
		{"outside", &client.Message{Outside: true}, "user-input outside | %s got agent-message outside (reply agent-message outside)", grain.LabelAgentMessage},
	} {
		tc.msg.MessageType, tc.msg.Message = "probe", "via "+probe(testcluster.Principal, p2)
		r, err := sdk.Ask(t.Context(), probe(testcluster.Principal, p1), tc.msg)
		want := fmt.Sprintf("%s@%s got "+tc.got, p1, names[1], p2+"@"+names[2])
		if err != nil || r.Message != want || r.Label != tc.label || r.Outside != tc.msg.Outside {
			t.Fatalf("%s: %+v, %v; want %q (label %v)", tc.name, r, err, want, tc.label)
		}
	}
	if _, err := sdk.Ask(t.Context(), probe(testcluster.Principal, p1), &client.Message{Message: "hello", Label: grain.LabelSystem}); errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "system") {
		t.Fatalf("a client's message labelled system: %v; want PermissionDenied", err)
	}
	if _, err := sdk.Ask(t.Context(), probe(testcluster.Principal, p1), &client.Message{Message: "hello", Label: 42}); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("a client's message labelled 42: %v; want InvalidArgument", err)
	}

	// A2A, with a2a-go, on the first silo, as the loopback principal dev.
	q1, q2 := placed("dev", "q", 1), placed("dev", "q", 2)
	a2a := a2aClient(t, c.Silo(0), probe("dev", q1))
	ask := func(label string) (*spec.Task, error) {
		p := spec.NewTextPart("via " + probe("dev", q2))
		if label != "" {
			p.Metadata = map[string]any{grain.LabelKey: label}
		}
		res, err := a2a.SendMessage(t.Context(), &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, p)})
		if err != nil {
			return nil, err
		}
		task, ok := res.(*spec.Task)
		if !ok || task.Status.State != spec.TaskStateCompleted || len(task.Artifacts) == 0 || len(task.Artifacts[0].Parts) == 0 {
			return nil, fmt.Errorf("not a completed task with an artifact: %+v", res)
		}
		return task, nil
	}
	for _, tc := range []struct{ claim, got, reply string }{
		{"", "agent-message outside | %s got agent-message outside (reply agent-message outside)", "agent-message"},
		{"tool-output", "tool-output outside | %s got tool-output outside (reply tool-output outside)", "tool-output"},
		// A claim above agent-message counts for nothing.
		{"user-input", "agent-message outside | %s got agent-message outside (reply agent-message outside)", "agent-message"},
	} {
		task, err := ask(tc.claim)
		if err != nil {
			t.Fatalf("A2A, claim %q: %v", tc.claim, err)
		}
		part := task.Artifacts[0].Parts[0]
		want := fmt.Sprintf("%s@%s got "+tc.got, q1, names[1], q2+"@"+names[2])
		if part.Text() != want || part.Metadata[grain.LabelKey] != tc.reply || part.Metadata[grain.OutsideKey] != true {
			t.Fatalf("A2A, claim %q: %q, metadata %v; want %q, label %s, outside", tc.claim, part.Text(), part.Metadata, want, tc.reply)
		}
	}

	// The JavaScript A2A SDK and the TypeScript MCP SDK.
	root := testutil.RepoRoot(t)
	testutil.NeedCommand(t, "node", "Node.js 20 or later, Debian's nodejs package: the JavaScript SDKs are the independent A2A and MCP clients")
	for _, js := range []struct {
		dir  string
		args []string
	}{
		{"a2ajs", []string{"http://" + c.Silo(0).A2AAddr + "/a2a/LabelProbe/dev/" + placed("dev", "j", 1) + "/", probe("dev", placed("dev", "j", 2))}},
		{"mcpjs", []string{"http://" + c.Silo(0).MCPAddr + "/mcp", "dev:" + placed("dev", "m", 1), probe("dev", placed("dev", "m", 2))}},
	} {
		dir := filepath.Join(root, "tests", js.dir)
		testutil.Need(t, dirExists(filepath.Join(dir, "node_modules")), "tests/"+js.dir+"'s pinned npm packages: npm ci --prefix tests/"+js.dir)
		cmd := exec.CommandContext(t.Context(), "node", append([]string{filepath.Join(dir, "labels.mjs")}, js.args...)...)
		out, err := cmd.CombinedOutput()
		t.Logf("node %s/labels.mjs:\n%s", js.dir, out)
		if err != nil || !strings.HasSuffix(string(out), "all ok\n") {
			t.Fatalf("%s/labels.mjs failed: %v", js.dir, err)
		}
	}
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
