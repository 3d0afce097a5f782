package mcp_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/oidctest"
)

// The official TypeScript SDK runs the MCP authorization flow by itself
// against a silo with an OpenID provider (the provider in the test): the
// 401's resource metadata, the provider's discovery, the authorization
// code with PKCE, then tools listed and called as the signed-in user
// (tests/mcpjs/auth.mjs).
func TestJSAuthorization(t *testing.T) {
	dir := jsDir(t)
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	const redirect = "http://127.0.0.1:1/callback" // the client's; nothing listens: the test reads the redirect
	p.AddClient("mcp-js", oidctest.Client{Audience: "agentsilo", RedirectURIs: []string{redirect}})
	p.SignIn(oidctest.Claims{"sub": "alice"})
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/js-auth/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.OIDC.Issuer, c.Gateway.Auth.OIDC.Audience = p.Issuer(), "agentsilo"
	})
	out, err := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "auth.mjs"), "http://"+s.MCPAddr()+"/mcp", "mcp-js", redirect).CombinedOutput()
	t.Logf("node auth.mjs:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\nall ok") {
		t.Fatalf("the TypeScript client's authorization: %v", err)
	}
}
