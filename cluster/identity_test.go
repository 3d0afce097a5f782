package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/chromedp/chromedp"
	"github.com/coreos/go-oidc/v3/oidc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/browsertest"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/oidctest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// payments is a type with a skill that needs a scope (transfer) and one
// that needs none (report); both answer "<skill> by <on behalf of>".
func payments(reg *grain.Registry) error {
	return reg.Register("Payments", func(grain.Host) (grain.Agent, error) {
		return agentFunc(func(_ context.Context, m *grain.Message) (*grain.Message, error) {
			r := m.Response()
			r.Message = m.MessageType + " by " + m.OnBehalfOf
			return r, nil
		}), nil
	}, grain.TypeInfo{Description: "Moves money.", Skills: []grain.Skill{
		{Name: "transfer", Description: "Moves money.", Scopes: []string{"payments:write"}},
		{Name: "report", Description: "Says what moved."},
	}})
}

// identitySilo starts a silo that takes the tokens of p (flags as `silo`
// reads them) and bob's API key, with the gateway, A2A, MCP and the
// dashboard on loopback.
func identitySilo(t testing.TB, p *oidctest.Provider, configure ...func(*SiloConfig)) *Silo {
	t.Helper()
	cfg, _, _, err := Program{Name: "silo"}.parseFlags([]string{"--oidc-issuer", p.Issuer(), "--oidc-audience", "agentsilo"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Auth.OIDC.PrincipalClaim != "sub" || cfg.Gateway.Auth.OIDC.GroupsClaim != "groups" {
		t.Fatalf("claim defaults: %+v", cfg.Gateway.Auth.OIDC)
	}
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := payments(reg); err != nil {
		t.Fatal(err)
	}
	cfg.Name = "id1"
	cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.PeerAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.A2A.Addr, cfg.MCP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Etcd.DataDir = t.TempDir()
	cfg.Etcd.EmbeddedAddr, cfg.Etcd.EmbeddedPeerAddr = testutil.FreeAddr(t), testutil.FreeAddr(t)
	cfg.Logger = testLogger()
	h := sha256.Sum256([]byte("bob-key"))
	cfg.Gateway.Auth.Keys = []auth.APIKey{{SHA256: hex.EncodeToString(h[:]), Principal: "bob"}}
	for _, f := range configure {
		f(&cfg)
	}
	s, err := NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// badTokens are the tokens every surface refuses.
func badTokens(t *testing.T, p *oidctest.Provider) map[string]string {
	t.Helper()
	good := p.Standard("alice", "agentsilo", time.Hour)
	with := func(k string, v any) oidctest.Claims {
		c := oidctest.Claims{}
		for k, v := range good {
			c[k] = v
		}
		c[k] = v
		return c
	}
	sign := func(c oidctest.Claims) string {
		tok, err := p.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := oidctest.SignWith(other, "key-1", good)
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := oidctest.SignWith(other, "key-unknown", good)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"expired":        sign(with("exp", time.Now().Add(-time.Hour).Unix())),
		"not yet valid":  sign(with("nbf", time.Now().Add(time.Hour).Unix())),
		"forged":         forged,
		"unknown key":    unknown,
		"other audience": sign(with("aud", "someone-else")),
		"other issuer":   sign(with("iss", "https://evil.example")),
		"alg none":       oidctest.Unsigned(good),
	}
}

// TestIdentity: one silo takes an OpenID provider's tokens on every
// surface, beside API keys. The SDK signs in with a refreshing token
// source (the client credentials grant at the provider); bad tokens are
// Unauthenticated on the gateway, MCP (401 pointing to the protected
// resource metadata), A2A and the dashboard's login, and the silo keeps
// serving; a skill's scope is needed by a token's caller on the gateway,
// MCP and A2A (PermissionDenied naming it), and not by an API key's; the
// provider rotates its key while the silo runs.
func TestIdentity(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) }) // after the silo's Close
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.AddClient("reporter", oidctest.Client{Secret: "s1", Audience: "agentsilo", Claims: map[string]any{"groups": []string{"finance"}}})
	p.AddClient("payer", oidctest.Client{Secret: "s2", Audience: "agentsilo"})
	aclFile := filepath.Join(t.TempDir(), "acl.json")
	rules := `{"Rules": [{"OwnerPattern": "bob", "AgentPattern": "shared", "CallerPattern": "group:finance", "Permission": "Message"}]}`
	if err := os.WriteFile(aclFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	s := identitySilo(t, p, func(c *SiloConfig) { c.ACLFile = aclFile })
	bad := badTokens(t, p)
	good := func(sub, scope string) string {
		c := p.Standard(sub, "agentsilo", time.Hour)
		if scope != "" {
			c["scope"] = scope
		}
		tok, err := p.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	t.Run("sdk", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		hctx := context.WithValue(t.Context(), oauth2.HTTPClient, &http.Client{Transport: tr})
		dial := func(id, secret string, scopes ...string) *client.Client {
			ts := (&clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: p.TokenURL(), Scopes: scopes}).TokenSource(hctx)
			c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithTokenSource(ts))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		reporter := dial("reporter", "s1", "payments:read")
		if r, err := reporter.Ask(t.Context(), "Payments:p", &client.Message{MessageType: "report"}); err != nil || r.Message != "report by reporter" {
			t.Fatalf("report: %v, %v", r, err)
		}
		if reporter.Principal() != "reporter" {
			t.Fatalf("principal %q", reporter.Principal())
		}
		_, err := reporter.Ask(t.Context(), "Payments:p", &client.Message{MessageType: "transfer"})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"payments:write"`) {
			t.Fatalf("transfer without the scope: %v, want PermissionDenied naming payments:write", err)
		}
		// An A2A agent that would send the user's token, on a silo that
		// signs none: refused before anything is sent.
		if _, err := reporter.Agents().Create(t.Context(), "A2A:out", map[string]string{a2a.ConfigCardURL: "https://agent.example.com", a2a.ConfigDelegate: "true"}); err != nil {
			t.Fatal(err)
		}
		if _, err := reporter.Ask(t.Context(), "A2A:out", &client.Message{Message: "hi"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--delegation-key") {
			t.Fatalf("delegate=true without a delegation key: %v, want FailedPrecondition naming --delegation-key", err)
		}
		payer := dial("payer", "s2", "payments:write")
		if r, err := payer.Ask(t.Context(), "Payments:p", &client.Message{MessageType: "transfer"}); err != nil || r.Message != "transfer by payer" {
			t.Fatalf("transfer with the scope: %v, %v", r, err)
		}
		// A wrong secret: the token source fails, the call is
		// Unauthenticated before anything is sent.
		ts := (&clientcredentials.Config{ClientID: "payer", ClientSecret: "nope", TokenURL: p.TokenURL()}).TokenSource(hctx)
		if c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithTokenSource(ts)); err == nil {
			c.Close()
			t.Fatal("dial with a token source that fails: no error")
		} else if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("dial with a token source that fails: %v, want Unauthenticated", err)
		}
	})

	t.Run("gateway", func(t *testing.T) {
		conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		gw := agentsilov1.NewGatewayClient(conn)
		ask := func(md metadata.MD, to, typ string) (*agentsilov1.AskResponse, error) {
			return gw.Ask(metadata.NewOutgoingContext(t.Context(), md), &agentsilov1.AskRequest{Message: &agentsilov1.AgentMessage{To: to, MessageType: typ, Message: "hi"}})
		}
		bearer := func(tok string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+tok) }
		for name, tok := range bad {
			if _, err := ask(bearer(tok), "Echo:x", ""); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %v, want Unauthenticated", name, err)
			}
		}
		if r, err := ask(bearer(good("alice", "")), "Payments:p", "report"); err != nil || r.GetMessage().GetMessage() != "report by alice" {
			t.Fatalf("alice's good token after the bad ones: %v, %v", r, err)
		}
		// An API key is bounded by the ACL alone: bob transfers on his
		// own agent without any scope.
		if r, err := ask(metadata.Pairs("x-api-key", "bob-key"), "Payments:p", "transfer"); err != nil || r.GetMessage().GetMessage() != "transfer by bob" {
			t.Fatalf("bob's API key: %v, %v", r, err)
		}
		if _, err := ask(bearer(good("alice", "payments:read")), "Payments:p", "transfer"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "payments:write") {
			t.Fatalf("alice without the scope: %v", err)
		}
		// Scopes and the ACL together: the scope does not lift the ACL
		// (bob's agent, no rule for alice).
		if _, err := ask(bearer(good("alice", "payments:write")), "Payments:bob:p", "transfer"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "permission Message") {
			t.Fatalf("alice with the scope on bob's agent: %v, want the ACL's PermissionDenied", err)
		}
		// The token's groups are the ACL's groups for the call: finance
		// may message bob's shared agent, others may not.
		finance := p.Standard("carol", "agentsilo", time.Hour)
		finance["groups"] = []string{"finance"}
		ftok, err := p.Sign(finance)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := ask(bearer(ftok), "Payments:bob:shared", "report"); err != nil || r.GetMessage().GetMessage() != "report by carol" {
			t.Fatalf("carol of group finance (her token's) on bob's shared agent: %v, %v", r, err)
		}
		if _, err := ask(bearer(good("dave", "")), "Payments:bob:shared", "report"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("dave, of no group, on bob's shared agent: %v, want PermissionDenied", err)
		}
		// The provider rotates its key while the silo runs.
		if err := p.Rotate(); err != nil {
			t.Fatal(err)
		}
		if r, err := ask(bearer(good("alice", "payments:write")), "Payments:p", "transfer"); err != nil || r.GetMessage().GetMessage() != "transfer by alice" {
			t.Fatalf("after the rotation: %v, %v", r, err)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		base := "http://" + s.MCPAddr()
		// Without a token: 401 whose challenge points to the endpoint's
		// protected resource metadata, which names the provider.
		resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := `resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want) {
			t.Fatalf("no token: %s, WWW-Authenticate %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
		resp, err = http.Get(base + "/.well-known/oauth-protected-resource/mcp")
		if err != nil {
			t.Fatal(err)
		}
		var prm struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			Scopes               []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&prm)
		resp.Body.Close()
		if err != nil || prm.Resource != base+"/mcp" || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != p.Issuer() || len(prm.Scopes) != 1 || prm.Scopes[0] != "payments:write" {
			t.Fatalf("protected resource metadata: %+v, %v", prm, err)
		}
		connect := func(tok string) (*mcpsdk.ClientSession, error) {
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "identity-test", Version: "1"}, nil)
			return c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{
				Endpoint:             base + "/mcp",
				HTTPClient:           &http.Client{Transport: bearerTransport{tr, tok}},
				DisableStandaloneSSE: true,
				MaxRetries:           -1,
			}, nil)
		}
		for name, tok := range bad {
			if cs, err := connect(tok); err == nil {
				cs.Close()
				t.Errorf("%s: connected", name)
			} else if !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
				t.Errorf("%s: %v, want 401", name, err)
			}
		}
		cs, err := connect(good("alice", "payments:read"))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Payments_report", Arguments: map[string]any{"agent": "alice:p", "message": "hi"}})
		if err != nil || res.IsError {
			t.Fatalf("report: %+v, %v", res, err)
		}
		res, err = cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Payments_transfer", Arguments: map[string]any{"agent": "alice:p", "message": "hi"}})
		if err == nil && !res.IsError {
			t.Fatalf("transfer without the scope: %+v", res)
		}
		if msg := mcpError(res, err); !strings.Contains(msg, "payments:write") {
			t.Fatalf("transfer without the scope: %q, want it to name payments:write", msg)
		}
	})

	t.Run("a2a", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.A2AAddr(), agentcard.WithPath("/a2a/Payments/alice/p/.well-known/agent-card.json"))
		if err != nil {
			t.Fatal(err)
		}
		skill := func(card *spec.AgentCard, name string) *spec.AgentSkill {
			for i := range card.Skills {
				if card.Skills[i].Name == name {
					return &card.Skills[i]
				}
			}
			return nil
		}
		// The public card shows the skills without scopes; the extended
		// card, to an authenticated caller, every skill with its scopes.
		if skill(card, "report") == nil || skill(card, "transfer") != nil || !card.Capabilities.ExtendedAgentCard {
			t.Fatalf("the public card's skills: %+v", card.Skills)
		}
		extended := func(tok string) (*spec.AgentCard, error) {
			creds := a2aclient.NewInMemoryCredentialsStore()
			creds.Set("u", "bearer", a2aclient.AuthCredential(tok))
			c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc),
				a2aclient.WithCallInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Destroy()
			return c.GetExtendedAgentCard(a2aclient.AttachSessionID(t.Context(), "u"), &spec.GetExtendedAgentCardRequest{})
		}
		ext, err := extended(good("alice", ""))
		if err != nil {
			t.Fatalf("the extended card: %v", err)
		}
		transfer := skill(ext, "transfer")
		if transfer == nil || skill(ext, "report") == nil || len(transfer.SecurityRequirements) != 1 || len(transfer.SecurityRequirements[0]["oidc"]) != 1 || transfer.SecurityRequirements[0]["oidc"][0] != "payments:write" {
			t.Fatalf("the extended card's transfer skill: %+v", transfer)
		}
		if _, err := extended(bad["expired"]); err == nil {
			t.Fatal("the extended card with an expired token: no error")
		}
		send := func(tok, skill string) error {
			creds := a2aclient.NewInMemoryCredentialsStore()
			creds.Set("u", "bearer", a2aclient.AuthCredential(tok))
			c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc),
				a2aclient.WithCallInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Destroy()
			msg := spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("hi"))
			msg.Metadata = map[string]any{a2a.MetaSkill: skill}
			_, err = c.SendMessage(a2aclient.AttachSessionID(t.Context(), "u"), &spec.SendMessageRequest{Message: msg})
			return err
		}
		for name, tok := range bad {
			// (Over JSON-RPC the SDK reports the 401 by its status.)
			if err := send(tok, "report"); err == nil || (!errors.Is(err, spec.ErrUnauthenticated) && !strings.Contains(err.Error(), "401")) {
				t.Errorf("%s: %v, want unauthenticated", name, err)
			}
		}
		if err := send(good("alice", ""), "report"); err != nil {
			t.Fatalf("report: %v", err)
		}
		if err := send(good("alice", "payments:read"), "transfer"); !errors.Is(err, spec.ErrUnauthorized) || !strings.Contains(err.Error(), "payments:write") {
			t.Fatalf("transfer without the scope: %v", err)
		}
		if err := send(good("alice", "payments:write"), "transfer"); err != nil {
			t.Fatalf("transfer with the scope: %v", err)
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		login := func(tok string) *http.Response {
			resp, err := hc.PostForm("http://"+s.HTTPAddr()+"/ui/login", url.Values{"key": {tok}, "next": {"/ui/"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		for name, tok := range bad {
			if resp := login(tok); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: %s, want 401", name, resp.Status)
			}
		}
		resp := login(good("alice", ""))
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
			t.Fatalf("login with a good token: %s", resp.Status)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.HTTPAddr()+"/ui/agents", nil)
		req.AddCookie(resp.Cookies()[0])
		page, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(page.Body)
		page.Body.Close()
		if page.StatusCode != http.StatusOK || !strings.Contains(string(b), "alice") {
			t.Fatalf("the agents page as alice: %s", page.Status)
		}
	})
}

// bearerTransport sends a bearer token with each request.
type bearerTransport struct {
	base http.RoundTripper
	tok  string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

// mcpError is the message of a failed tool call: the protocol error's, or
// the tool error's text.
func mcpError(res *mcpsdk.CallToolResult, err error) string {
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, " ")
}

// TestDelegatedToken: alice signs in with the provider's token and asks
// an A2A agent of hers configured with delegate=true; the outside agent
// (the A2A SDK's server) receives a token the cluster signed for alice,
// for its own origin, naming the calling agent as the actor, and verifies
// it with go-oidc against the keys the silo publishes on its HTTP port.
func TestDelegatedToken(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	o := outside.Start(false)
	t.Cleanup(o.Close)
	keyFile := filepath.Join(t.TempDir(), "delegation.pem")
	if err := os.WriteFile(keyFile, ecKeyPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := testutil.FreeAddr(t)
	issuer := "http://" + httpAddr + "/agentsilo"
	s := identitySilo(t, p, func(c *SiloConfig) {
		c.HTTPAddr = httpAddr
		c.A2A.AllowPrivateNetworks = true
		c.Delegation = DelegationConfig{Issuer: issuer, KeyFile: keyFile}
	})
	tok, err := p.Sign(p.Standard("alice", "agentsilo", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// (A bearer_token configured beside delegate=true is not sent: the
	// user's token is.)
	if _, err := c.Agents().Create(t.Context(), "A2A:out", map[string]string{a2a.ConfigCardURL: o.CardURL(), a2a.ConfigDelegate: "true", a2a.ConfigBearerToken: "shared-key"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ask(t.Context(), "A2A:out", &client.Message{Message: "hello"}); err != nil {
		t.Fatal(err)
	}
	var bearer string
	for _, a := range o.Authorizations() {
		bearer, _ = strings.CutPrefix(a, "Bearer ")
	}
	if bearer == "" {
		t.Fatalf("the outside agent got no token: %q", o.Authorizations())
	}
	// The outside agent's check: discovery at the issuer, its keys, the
	// audience its own origin.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ctx := oidc.ClientContext(t.Context(), &http.Client{Transport: tr})
	prov, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	idt, err := prov.VerifierContext(ctx, &oidc.Config{ClientID: o.URL}).Verify(ctx, bearer)
	if err != nil {
		t.Fatalf("the outside agent's check: %v", err)
	}
	var claims struct {
		Act struct {
			Sub string `json:"sub"`
		} `json:"act"`
	}
	if err := idt.Claims(&claims); err != nil || idt.Subject != "alice" || claims.Act.Sub != "A2A:alice:out" || time.Until(idt.Expiry) > auth.DelegationTTL {
		t.Fatalf("the token: sub %q, act %+v, exp %v, %v", idt.Subject, claims.Act, idt.Expiry, err)
	}
	// Another audience's check refuses it.
	if _, err := prov.VerifierContext(ctx, &oidc.Config{ClientID: "https://elsewhere.example"}).Verify(ctx, bearer); err == nil {
		t.Fatal("the token verified for another audience")
	}
}

// ecKeyPEM is a new ECDSA P-256 private key, PKCS#8 PEM.
func ecKeyPEM(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TestSessionTokenExpiry: a session attached with a token ends when the
// token expires; the SDK attaches it again with a fresh token from its
// source (the provider issues another), and the session goes on serving,
// its address unchanged.
func TestSessionTokenExpiry(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.AddClient("short", oidctest.Client{Secret: "s", Audience: "agentsilo", TTL: 2 * time.Second})
	s := identitySilo(t, p, func(c *SiloConfig) { c.Gateway.Auth.OIDC.Leeway = -1 })
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hctx := context.WithValue(t.Context(), oauth2.HTTPClient, &http.Client{Transport: tr})
	ts := (&clientcredentials.Config{ClientID: "short", ClientSecret: "s", TokenURL: p.TokenURL()}).TokenSource(hctx)
	c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithTokenSource(ts))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.Address()
	before := p.Issued()
	// Only a new session stream asks the source for a token now: the
	// session's was ended at its token's expiry.
	waitFor(t, "the session attached again with a fresh token", func() bool { return p.Issued() > before })
	if r, err := c.Ask(t.Context(), "Echo:x", &client.Message{Message: "still here"}); err != nil || !strings.Contains(r.Message, "still here") {
		t.Fatalf("after the token's expiry: %v, %v", r, err)
	}
	if c.Address() != addr {
		t.Fatalf("the session is %s, was %s", c.Address(), addr)
	}
}

// signInSilo starts a silo whose dashboard signs users in at p (client
// "dashboard", a public client), registered with its callback, and p
// signing in alice of group ops.
func signInSilo(t *testing.T, p *oidctest.Provider) *Silo {
	t.Helper()
	s := identitySilo(t, p, func(c *SiloConfig) { c.OIDCClientID = "dashboard" })
	p.AddClient("dashboard", oidctest.Client{Audience: "agentsilo", RedirectURIs: []string{"http://" + s.HTTPAddr() + "/ui/login/oidc/callback"}})
	p.SignIn(oidctest.Claims{"sub": "alice", "groups": []string{"ops"}})
	return s
}

// TestDashboardSignIn: the dashboard signs a user in at the provider with
// the authorization code grant and PKCE, over real HTTP with a cookie
// jar: the login page offers it, the provider sends the browser back with
// a code, the dashboard's session is the user's; a callback with a state
// this browser did not start, or a code used twice, is refused.
func TestDashboardSignIn(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := signInSilo(t, p)
	base := "http://" + s.HTTPAddr()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var codeURL string
	hc := &http.Client{Transport: tr, Jar: jar, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/ui/login/oidc/callback" {
			codeURL = r.URL.String()
		}
		return nil
	}}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, page := get(base + "/ui/login"); code != http.StatusOK || !strings.Contains(page, `id="signin"`) {
		t.Fatalf("the login page: %d, no sign-in link:\n%s", code, page)
	}
	if code, page := get(base + "/ui/login/oidc?next=/ui/agents"); code != http.StatusOK || !strings.Contains(page, `id="signedin"`) {
		t.Fatalf("sign-in: %d\n%s", code, page)
	}
	if code, page := get(base + "/ui/agents"); code != http.StatusOK || !strings.Contains(page, "alice") {
		t.Fatalf("the agents page after signing in: %d\n%s", code, page)
	}
	// The same code again (its state is spent): refused.
	if code, _ := get(codeURL); code != http.StatusUnauthorized {
		t.Fatalf("the callback replayed: %d, want 401", code)
	}
	// A state this browser did not start: refused.
	other, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc.Jar = other
	if code, _ := get(base + "/ui/login/oidc/callback?code=x&state=y"); code != http.StatusUnauthorized {
		t.Fatalf("a callback with a foreign state: %d, want 401", code)
	}
}

// TestDashboardSignInBrowser: the same sign-in in headless Chromium: the
// login page's link, the provider, and back on the dashboard as alice.
func TestDashboardSignInBrowser(t *testing.T) {
	chromium := testutil.NeedCommand(t, "chromium", "Debian's chromium")
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := signInSilo(t, p)
	b, stop := browsertest.New(t, t.Context(), chromium, 1200, 800)
	defer stop()
	b.Run("sign in", chromedp.Navigate("http://"+s.HTTPAddr()+"/ui/login"), chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("logout")))
	if who := b.Text(".who"); !strings.Contains(who, "alice") {
		t.Fatalf("signed in as %q, want alice", who)
	}
}
