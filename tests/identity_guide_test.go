package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/internal/oidctest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestIdentityGuide runs the identity guide (docs/identity.md) as
// written: a silo process with its flags (the issuer that of a provider
// the test runs), and the CLI block with a token of that provider; a bad
// token is exit code 4 (Unauthenticated).
func TestIdentityGuide(t *testing.T) {
	buildBinaries(t)
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	words := shellWords(t, strings.TrimSpace(testutil.DocBlock(t, "docs/identity.md", "identity:silo")))
	if len(words) < 3 || strings.Join(words[:3], " ") != "go run ./cmd/silo" {
		t.Fatalf("identity:silo: %q is not a silo command", words)
	}
	args := words[3:]
	for i := range args {
		if args[i] == "--oidc-issuer" && i+1 < len(args) {
			args[i+1] = p.Issuer()
		}
	}
	silo := startSilo(t, t.TempDir(), args...)
	claims := p.Standard("alice", "agentsilo", time.Hour)
	claims["roles"] = []string{"finance"}
	tok, err := p.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := docShell(t, t.TempDir(), testutil.DocBlock(t, "docs/identity.md", "identity:cli"), "AGENTSILO_ADDR="+silo.gateway, "TOKEN="+tok)
	if !strings.Contains(out, "hi there") || !strings.Contains(out, "Echo:alice:hello") {
		t.Errorf("identity:cli printed %q, want the reply and alice's Echo among the agents", out)
	}
	if _, errOut, code := silo.cli("--token", oidctest.Unsigned(claims), "ask", "Echo:hello", "hi"); code != 4 || !strings.Contains(errOut, "Unauthenticated") {
		t.Errorf("an unsigned token: exit %d, %q; want 4, Unauthenticated", code, errOut)
	}
}
