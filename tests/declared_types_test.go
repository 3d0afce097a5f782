package tests

import (
	"bytes"
	"errors"
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
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// runCLI runs the client binary with args against gateway, and returns
// its stdout, stderr and exit code.
func runCLI(t *testing.T, gateway string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bins, err := testcluster.Build()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bins.Client, append([]string{"--addr", gateway}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("client %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// dialAs returns an SDK client to the gateways of c's silos (those given,
// else all) as principal, closed when the test ends.
func dialAs(t *testing.T, c *testcluster.Cluster, principal string, silos ...int) *client.Client {
	t.Helper()
	if len(silos) == 0 {
		silos = c.Live()
	}
	var addrs []string
	for _, i := range silos {
		addrs = append(addrs, c.Silo(i).GatewayAddr)
	}
	cl, err := client.Dial(t.Context(), addrs, client.WithPrincipal(principal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestDeclaredTypeCLI: on three silo processes started with
// --llm-allow-private-networks, a model agent type declared with
// `client types apply`, its model a fake model server on 127.0.0.1 in this
// process, answers an SDK Ask through any gateway with the model's text;
// a dry run stores nothing; bad definitions are refused with
// InvalidArgument naming the field and exit code 2; `client types` marks
// it declared; deleted, it is NotFound.
func TestDeclaredTypeCLI(t *testing.T) {
	srv := fakemodel.NewFunc(func(r fakemodel.Request) fakemodel.Step {
		return fakemodel.Step{Text: "model: " + r.LastMessage().Data}
	})
	defer srv.Close()
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: []string{"--llm-allow-private-networks"}})
	gw := c.Silo(0).GatewayAddr
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("helper.yaml", fmt.Sprintf(`type: Helper
description: Answers questions about orders.
model:
  provider: openai
  base_url: %s
  name: fake-1
system_prompt: You help customers with their orders.
`, srv.OpenAIURL()))
	admin := dialAs(t, c, "system")

	for _, bad := range []struct{ name, text, field string }{
		{"provider.yaml", "type: Helper\nmodel: {provider: gemini, name: m}\n", "model.provider"},
		{"field.yaml", "type: Helper\nmodel: {provider: openai, name: m}\nsytem_prompt: hi\n", `unknown field "sytem_prompt"`},
		{"rounds.json", `{"type": "Helper", "model": {"provider": "openai", "name": "m"}, "limits": {"max_rounds": 1000}}`, "limits.max_rounds"},
	} {
		_, stderr, code := runCLI(t, gw, "--as", "system", "types", "apply", file(bad.name, bad.text))
		if code != 2 || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, bad.field) {
			t.Errorf("types apply %s: exit %d, %q; want 2 and InvalidArgument naming %s", bad.name, code, stderr, bad.field)
		}
	}
	stdout, stderr, code := runCLI(t, gw, "--as", "system", "types", "apply", "--dry-run", good)
	if code != 0 || !strings.Contains(stdout, "valid: type Helper would be created") {
		t.Fatalf("types apply --dry-run: exit %d, %q %q", code, stdout, stderr)
	}
	if l, err := admin.Admin().DeclaredTypes(t.Context()); err != nil || len(l) != 0 {
		t.Fatalf("declared types after a dry run and refusals: %v, %v; want none", l, err)
	}
	if _, stderr, code := runCLI(t, gw, "types", "apply", good); code != 4 || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("types apply as dev: exit %d, %q; want 4, PermissionDenied", code, stderr)
	}

	stdout, stderr, code = runCLI(t, gw, "--as", "system", "types", "apply", good)
	if code != 0 || stdout != "created type Helper\n" || stderr != "" {
		t.Fatalf("types apply: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, c.Silo(2).GatewayAddr, "types")
	if code != 0 || !strings.Contains(stdout, "Helper (declared)") || !strings.Contains(stdout, "Answers questions about orders.") || strings.Contains(stdout, "Echo (declared)") {
		t.Fatalf("types: exit %d:\n%s", code, stdout)
	}
	// Every gateway, whichever silo the agent lives on.
	for i := range 3 {
		cl := c.Client(t, i)
		r, err := cl.Ask(t.Context(), "Helper:a", &client.Message{Message: fmt.Sprintf("where is order %d?", i)})
		if err != nil || r.Message != fmt.Sprintf("model: where is order %d?", i) {
			t.Fatalf("ask Helper:a through %s: %v, %v", c.Silo(i).Name, r, err)
		}
	}
	hits, err := c.Client(t, 1).Directory().Search(t.Context(), "orders questions", client.DirectoryQuery{Kind: "type"})
	t.Logf("directory search: %v, %v", hits, err)

	stdout, _, code = runCLI(t, gw, "--as", "system", "types", "delete", "Helper")
	if code != 0 || stdout != "deleted type Helper\n" {
		t.Fatalf("types delete: exit %d, %q", code, stdout)
	}
	sdk := c.Client(t, 1)
	testutil.WaitFor(t, "Helper's activation ended", func() bool {
		l, err := sdk.Agents().List(t.Context(), "", "Helper")
		return err == nil && len(l) == 0
	})
	if _, err := sdk.Ask(t.Context(), "Helper:a", &client.Message{Message: "still there?"}); errs.Code(err) != codes.NotFound {
		t.Fatalf("ask a deleted type: %v; want NotFound", err)
	}
	if _, stderr, code := runCLI(t, gw, "--as", "system", "types", "delete", "Helper"); code != 3 || !strings.Contains(stderr, "NotFound") {
		t.Fatalf("types delete again: exit %d, %q; want 3, NotFound", code, stderr)
	}
	if _, stderr, code := runCLI(t, gw, "--as", "system", "types", "delete", "Echo"); code != 1 || !strings.Contains(stderr, "FailedPrecondition") {
		t.Fatalf("types delete Echo (in code): exit %d, %q; want 1, FailedPrecondition", code, stderr)
	}
	echo := file("echo.yaml", strings.Replace(string(mustRead(t, good)), "type: Helper", "type: Echo", 1))
	if _, stderr, code := runCLI(t, gw, "--as", "system", "types", "apply", echo); code != 1 || !strings.Contains(stderr, "FailedPrecondition") || !strings.Contains(stderr, "registered in code") {
		t.Fatalf("types apply Echo (in code): exit %d, %q; want 1, FailedPrecondition", code, stderr)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
