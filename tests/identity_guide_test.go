package tests

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/agentsilo/agentsilo/a2a/outside"
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

// TestIdentityDelegationGuide runs the guide's section on calling an
// outside agent on the user's behalf: the key made by its openssl line,
// a silo process with its flags (the addresses free ones, the issuer a
// provider in the test, and --a2a-allow-private-networks for an outside
// agent on loopback), and its CLI block with WEATHER_URL an outside A2A
// agent (the A2A SDK's server) that records what it got; that agent's
// check of the token, with go-oidc against the keys the silo publishes.
func TestIdentityDelegationGuide(t *testing.T) {
	_, err := exec.LookPath("openssl")
	testutil.Need(t, err == nil, "openssl")
	buildBinaries(t)
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	o := outside.Start(false)
	t.Cleanup(o.Close)
	dir := t.TempDir()
	docShell(t, dir, testutil.DocBlock(t, "docs/identity.md", "identity:keygen"))

	words := shellWords(t, strings.TrimSpace(testutil.DocBlock(t, "docs/identity.md", "identity:delegate-silo")))
	if len(words) < 3 || strings.Join(words[:3], " ") != "go run ./cmd/silo" {
		t.Fatalf("identity:delegate-silo: %q is not a silo command", words)
	}
	silo := &siloProc{t: t, gateway: freePort(t), http: freePort(t)}
	issuer := "http://" + silo.http
	args := words[3:]
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--oidc-issuer":
			args[i+1] = p.Issuer()
		case "--a2a-addr":
			args[i+1] = freePort(t)
		case "--http-addr":
			args[i+1] = silo.http
		case "--delegation-issuer":
			args[i+1] = issuer
		case "--delegation-key":
			args[i+1] = filepath.Join(dir, args[i+1])
		}
	}
	silo.args = append([]string{"--name", "delegate", "--data-dir", t.TempDir(), "--gateway-addr", silo.gateway,
		"--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--embedded-etcd-addr", testutil.FreeAddrPair(t),
		"--a2a-allow-private-networks"}, args...)
	silo.start()

	claims := p.Standard("alice", "agentsilo", time.Hour)
	claims["scope"] = "payments:read payments:write"
	tok, err := p.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	docShell(t, dir, testutil.DocBlock(t, "docs/identity.md", "identity:delegate-cli"), "AGENTSILO_ADDR="+silo.gateway, "TOKEN="+tok, "WEATHER_URL="+o.CardURL())
	var bearer string
	for _, a := range o.Authorizations() {
		bearer, _ = strings.CutPrefix(a, "Bearer ")
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ctx := oidc.ClientContext(t.Context(), &http.Client{Transport: tr})
	prov, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	idt, err := prov.VerifierContext(ctx, &oidc.Config{ClientID: o.URL}).Verify(ctx, bearer)
	if err != nil || idt.Subject != "alice" {
		t.Fatalf("the outside agent's check of %q: %v, %v", bearer, idt, err)
	}

	// The token exchange, with curl: alice's token down-scoped for the
	// ledger.
	_, err = exec.LookPath("curl")
	testutil.Need(t, err == nil, "curl")
	out, _ := docShell(t, dir, testutil.DocBlock(t, "docs/identity.md", "identity:exchange"), "TOKEN="+tok, "ISSUER="+issuer)
	var res struct {
		AccessToken string `json:"access_token"`
		Scope       string `json:"scope"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Scope != "payments:read" {
		t.Fatalf("identity:exchange printed %q (%v)", out, err)
	}
	idt, err = prov.VerifierContext(ctx, &oidc.Config{ClientID: "https://ledger.example.com"}).Verify(ctx, res.AccessToken)
	if err != nil || idt.Subject != "alice" {
		t.Fatalf("the exchanged token: %v, %v", idt, err)
	}
}
