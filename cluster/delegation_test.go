package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/coreos/go-oidc/v3/oidc"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/oidctest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp"
)

// delegation configures a silo to sign delegated tokens with a key of its
// own, published on its HTTP port; it returns the tokens' issuer and the
// configuration, for identitySilo.
func delegation(t *testing.T) (string, func(*SiloConfig)) {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "delegation.pem")
	if err := os.WriteFile(keyFile, ecKeyPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := testutil.FreeAddr(t)
	issuer := "http://" + httpAddr + "/agentsilo"
	return issuer, func(c *SiloConfig) {
		c.HTTPAddr = httpAddr
		c.A2A.AllowPrivateNetworks = true
		c.MCP.AllowPrivateNetworks = true
		c.Delegation = DelegationConfig{Issuer: issuer, KeyFile: keyFile}
	}
}

// delegatingSilo starts an identity silo that signs delegated tokens (see
// delegation); it returns the silo and the tokens' issuer.
func delegatingSilo(t *testing.T, p *oidctest.Provider) (*Silo, string) {
	t.Helper()
	issuer, cfg := delegation(t)
	return identitySilo(t, p, cfg), issuer
}

// delegatedClaims are what an outside party reads of a delegated token
// it verified.
type delegatedClaims struct {
	Sub   string
	Aud   []string
	Scope []string
	Act   string // act.sub
	Chain []string
	Exp   time.Time
}

// verifyDelegated checks tok as an outside party does: discovery at the
// issuer, its published keys, audience aud.
func verifyDelegated(ctx context.Context, issuer, aud, tok string) (*delegatedClaims, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ctx = oidc.ClientContext(ctx, &http.Client{Transport: tr})
	prov, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		return nil, err
	}
	idt, err := prov.VerifierContext(ctx, &oidc.Config{ClientID: aud}).Verify(ctx, tok)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Scope string         `json:"scope"`
		Act   map[string]any `json:"act"`
	}
	if err := idt.Claims(&raw); err != nil {
		return nil, err
	}
	c := &delegatedClaims{Sub: idt.Subject, Aud: idt.Audience, Scope: strings.Fields(raw.Scope), Exp: idt.Expiry}
	for a := raw.Act; a != nil; a, _ = a["act"].(map[string]any) {
		sub, _ := a["sub"].(string)
		c.Chain = append(c.Chain, sub)
	}
	if len(c.Chain) > 0 {
		c.Act = c.Chain[0]
	}
	return c, nil
}

// tokenClient dials the gateway with tok as the caller's token.
func tokenClient(t *testing.T, s *Silo, tok string) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// userToken is a token of p for sub, for the silo, with scope.
func userToken(t *testing.T, p *oidctest.Provider, sub, scope string) string {
	t.Helper()
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

// issueServer is an outside MCP server (the official SDK's) that takes
// only the cluster's delegated tokens for itself, verified against the
// keys the silo publishes, and notes the token of each tool call.
type issueServer struct {
	URL string // its endpoint, the tokens' audience
	srv *httptest.Server

	mu    sync.Mutex
	calls []*delegatedClaims
	users map[string]bool // the users whose sessions it saw start
}

func startIssueServer(t *testing.T, issuer string) *issueServer {
	is := &issueServer{users: map[string]bool{}}
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "issues", Version: "1"}, nil)
	tool := func(name string) {
		mcpsdk.AddTool(srv, &mcpsdk.Tool{Name: name, Description: name + " an issue"}, func(_ context.Context, req *mcpsdk.CallToolRequest, in struct {
			Title string `json:"title"`
		}) (*mcpsdk.CallToolResult, any, error) {
			ti := req.Extra.TokenInfo
			c, _ := ti.Extra["claims"].(*delegatedClaims)
			is.mu.Lock()
			is.calls = append(is.calls, c)
			is.mu.Unlock()
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: name + " " + in.Title + " for " + ti.UserID}}}, nil, nil
		})
	}
	tool("create_issue")
	tool("read_issue")
	verify := func(ctx context.Context, tok string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		c, err := verifyDelegated(ctx, issuer, is.URL, tok)
		if err != nil {
			return nil, errors.Join(mcpauth.ErrInvalidToken, err)
		}
		is.mu.Lock()
		is.users[c.Sub] = true
		is.mu.Unlock()
		return &mcpauth.TokenInfo{UserID: c.Sub, Scopes: c.Scope, Expiration: c.Exp, Extra: map[string]any{"claims": c}}, nil
	}
	h := mcpauth.RequireBearerToken(verify, nil)(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil))
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	is.srv = httptest.NewServer(mux)
	is.URL = is.srv.URL + "/mcp"
	t.Cleanup(func() {
		is.srv.CloseClientConnections()
		is.srv.Close()
	})
	return is
}

func (is *issueServer) lastCall() *delegatedClaims {
	is.mu.Lock()
	defer is.mu.Unlock()
	if len(is.calls) == 0 {
		return nil
	}
	return is.calls[len(is.calls)-1]
}

// TestDelegatedTokenMCP: an MCP agent configured with delegate=true calls
// a tool of an outside MCP server (the official SDK's, requiring bearer
// tokens it verifies with the keys the silo publishes) with a token the
// cluster signed for the user the call is made for, the server's URL as
// its audience, the agent as its actor, and only the tool's scopes; each
// user has a session of their own, which the server's check that a
// session stays with its user requires.
func TestDelegatedTokenMCP(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	aclFile := filepath.Join(t.TempDir(), "acl.json")
	rules := `{"Rules": [{"OwnerPattern": "alice", "AgentPattern": "issues", "CallerPattern": "bob", "Permission": "Message"}]}`
	if err := os.WriteFile(aclFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server stops after the silo, whose agents end their sessions.
	issuer, cfg := delegation(t)
	is := startIssueServer(t, issuer)
	s := identitySilo(t, p, cfg, func(c *SiloConfig) { c.ACLFile = aclFile })

	alice := tokenClient(t, s, userToken(t, p, "alice", "repo:write repo:read payments:write"))
	if _, err := alice.Agents().Create(t.Context(), "MCP:alice:issues", map[string]string{
		mcp.RemoteURL: is.URL, mcp.RemoteDelegate: "true", mcp.RemoteBearerToken: "shared-key",
		mcp.RemoteScopesPrefix + "create_issue": "repo:write",
	}); err != nil {
		t.Fatal(err)
	}
	ask := func(c *client.Client, tool string) string {
		t.Helper()
		r, err := c.Ask(t.Context(), "MCP:alice:issues", &client.Message{MessageType: tool, Data: []byte(`{"title":"t1"}`)})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return r.Message
	}
	if got := ask(alice, "create_issue"); got != "create_issue t1 for alice" {
		t.Fatalf("create_issue: %q", got)
	}
	c := is.lastCall()
	if c == nil || c.Sub != "alice" || c.Act != "MCP:alice:issues" || !slices.Equal(c.Aud, []string{is.URL}) || !slices.Equal(c.Scope, []string{"repo:write"}) || time.Until(c.Exp) > auth.DelegationTTL {
		t.Fatalf("the token of create_issue: %+v, want alice's for %s with repo:write only", c, is.URL)
	}
	// A tool without declared scopes: a token with none.
	ask(alice, "read_issue")
	if c := is.lastCall(); c == nil || c.Sub != "alice" || len(c.Scope) != 0 {
		t.Fatalf("the token of read_issue: %+v, want alice's without scopes", c)
	}
	// bob (his API key) may message alice's agent (the ACL says so): his
	// calls carry his own token, on a session of his own.
	bobKey, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithAPIKey("bob-key"))
	if err != nil {
		t.Fatal(err)
	}
	defer bobKey.Close()
	if got := ask(bobKey, "create_issue"); got != "create_issue t1 for bob" {
		t.Fatalf("bob's create_issue: %q", got)
	}
	if got := ask(alice, "create_issue"); got != "create_issue t1 for alice" {
		t.Fatalf("alice's again: %q", got)
	}
	is.mu.Lock()
	users := len(is.users)
	is.mu.Unlock()
	if users != 2 {
		t.Fatalf("the server saw %d users, want 2", users)
	}
}

// TestDelegatedTokenSkillScopes: the token an A2A agent sends on a user's
// behalf carries the scopes of the skill called, as the outside agent's
// card declares them (its first security requirement), or as the
// agent's configuration declares them instead; not the user's other
// scopes, and none for a skill that needs none.
func TestDelegatedTokenSkillScopes(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	o := outside.Start(false,
		spec.AgentSkill{ID: "forecast", Name: "forecast", Description: "the weather", Tags: []string{"weather"},
			SecurityRequirements: spec.SecurityRequirementsOptions{{"oidc": {"weather:read"}}, {"key": {}}}},
		spec.AgentSkill{ID: "alerts", Name: "alerts", Description: "sends alerts", Tags: []string{"weather"},
			SecurityRequirements: spec.SecurityRequirementsOptions{{"oidc": {"weather:read"}, "other": {"alerts:write"}}}},
		spec.AgentSkill{ID: "about", Name: "about", Description: "says what it is", Tags: []string{"about"}},
	)
	t.Cleanup(o.Close)
	s, issuer := delegatingSilo(t, p)
	alice := tokenClient(t, s, userToken(t, p, "alice", "weather:read alerts:write payments:write"))
	create := func(alias string, cfg map[string]string) {
		t.Helper()
		cfg[a2a.ConfigCardURL], cfg[a2a.ConfigDelegate] = o.CardURL(), "true"
		if _, err := alice.Agents().Create(t.Context(), "A2A:"+alias, cfg); err != nil {
			t.Fatal(err)
		}
	}
	create("weather", map[string]string{})
	create("pinned", map[string]string{a2a.ConfigScopesPrefix + "alerts": "alerts:write"})
	scopesOf := func(agent, skill string) []string {
		t.Helper()
		n := len(o.Authorizations())
		if _, err := alice.Ask(t.Context(), agent, &client.Message{MessageType: skill, Message: "hello"}); err != nil {
			t.Fatalf("%s %s: %v", agent, skill, err)
		}
		auths := o.Authorizations()
		if len(auths) == n {
			t.Fatalf("%s %s: the outside agent got no token", agent, skill)
		}
		tok, _ := strings.CutPrefix(auths[len(auths)-1], "Bearer ")
		c, err := verifyDelegated(t.Context(), issuer, o.URL, tok)
		if err != nil || c.Sub != "alice" {
			t.Fatalf("%s %s: the token: %+v, %v", agent, skill, c, err)
		}
		return c.Scope
	}
	for _, tc := range []struct {
		agent, skill string
		want         []string
	}{
		{"A2A:weather", "forecast", []string{"weather:read"}},
		{"A2A:weather", "alerts", []string{"alerts:write", "weather:read"}},
		{"A2A:weather", "about", nil},
		{"A2A:weather", "", nil}, // no skill named, and the card has three
		{"A2A:pinned", "alerts", []string{"alerts:write"}},
		{"A2A:pinned", "forecast", []string{"weather:read"}},
	} {
		if got := scopesOf(tc.agent, tc.skill); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: scopes %q, want %q", tc.agent, tc.skill, got, tc.want)
		}
	}
}

// TestTokenExchange: the silo's token endpoint (RFC 8693), driven by
// golang.org/x/oauth2's client: bob, authenticated by his API key,
// exchanges alice's token of the provider for one the cluster signs for
// her, for another audience, down-scoped to what he asks; a scope her
// token lacks is invalid_scope (400), a client without credentials
// invalid_client (401); the delegated token is exchanged again, the
// actors nested.
func TestTokenExchange(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	_, issuer := delegatingSilo(t, p)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	// The endpoint is in the issuer's discovery document.
	ctx := oidc.ClientContext(t.Context(), &http.Client{Transport: tr})
	prov, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	if prov.Endpoint().TokenURL != issuer+"/token" {
		t.Fatalf("token_endpoint %q", prov.Endpoint().TokenURL)
	}
	exchange := func(cred, subject, audience string, scopes ...string) (*oauth2.Token, error) {
		hc := &http.Client{Transport: tr}
		if cred != "" {
			hc.Transport = bearerTransport{base: tr, tok: cred}
		}
		cc := clientcredentials.Config{
			ClientID: "bob", TokenURL: prov.Endpoint().TokenURL, AuthStyle: oauth2.AuthStyleInParams, Scopes: scopes,
			EndpointParams: url.Values{
				"grant_type":         {auth.GrantTokenExchange},
				"subject_token":      {subject},
				"subject_token_type": {auth.TokenTypeAccessToken},
				"audience":           {audience},
			},
		}
		return cc.Token(context.WithValue(t.Context(), oauth2.HTTPClient, hc))
	}
	aliceTok := userToken(t, p, "alice", "payments:read payments:write")
	tok, err := exchange("bob-key", aliceTok, "https://ledger.example", "payments:read")
	if err != nil {
		t.Fatal(err)
	}
	if tok.TokenType != "Bearer" || tok.Extra("issued_token_type") != auth.TokenTypeAccessToken || tok.Extra("scope") != "payments:read" || time.Until(tok.Expiry) > auth.DelegationTTL {
		t.Fatalf("the answer: %+v, issued_token_type %v, scope %v", tok, tok.Extra("issued_token_type"), tok.Extra("scope"))
	}
	c, err := verifyDelegated(t.Context(), issuer, "https://ledger.example", tok.AccessToken)
	if err != nil || c.Sub != "alice" || !slices.Equal(c.Scope, []string{"payments:read"}) || !slices.Equal(c.Chain, []string{"bob"}) {
		t.Fatalf("the exchanged token: %+v, %v", c, err)
	}
	// Without scope: the subject token's.
	if tok, err := exchange("bob-key", aliceTok, "https://ledger.example"); err != nil || tok.Extra("scope") != "payments:read payments:write" {
		t.Fatalf("without scope: %v %v", tok, err)
	}
	// A scope alice's token lacks.
	var re *oauth2.RetrieveError
	if _, err := exchange("bob-key", aliceTok, "https://ledger.example", "payments:read", "admin"); !errors.As(err, &re) || re.ErrorCode != "invalid_scope" || re.Response.StatusCode != http.StatusBadRequest || !strings.Contains(re.ErrorDescription, `"admin"`) {
		t.Fatalf("a scope the subject lacks: %v, want invalid_scope", err)
	}
	// No client credentials.
	if _, err := exchange("", aliceTok, "https://ledger.example"); !errors.As(err, &re) || re.ErrorCode != "invalid_client" || re.Response.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no client credentials: %v, want invalid_client", err)
	}
	// A forged subject token, an expired one.
	bad := badTokens(t, p)
	for _, name := range []string{"forged", "expired"} {
		if _, err := exchange("bob-key", bad[name], "https://ledger.example"); !errors.As(err, &re) || re.ErrorCode != "invalid_request" {
			t.Fatalf("a %s subject token: %v, want invalid_request", name, err)
		}
	}
	// alice herself (her token as the client's) exchanges the delegated
	// token again, down-scoped once more; its actors nest.
	again, err := exchange(aliceTok, tok.AccessToken, "https://audit.example", "payments:read")
	if err != nil {
		t.Fatal(err)
	}
	c, err = verifyDelegated(t.Context(), issuer, "https://audit.example", again.AccessToken)
	if err != nil || c.Sub != "alice" || !slices.Equal(c.Chain, []string{"alice", "bob"}) {
		t.Fatalf("the token exchanged again: %+v, %v", c, err)
	}
	if _, err := exchange(aliceTok, tok.AccessToken, "https://audit.example", "payments:write"); !errors.As(err, &re) || re.ErrorCode != "invalid_scope" {
		t.Fatalf("a scope the delegated token lacks: %v, want invalid_scope", err)
	}
	// The wrong grant.
	form := url.Values{"grant_type": {"client_credentials"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Api-Key", "bob-key")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var oerr struct{ Error string }
	if err := json.NewDecoder(resp.Body).Decode(&oerr); err != nil || resp.StatusCode != http.StatusBadRequest || oerr.Error != "unsupported_grant_type" {
		t.Fatalf("client_credentials: %d %+v %v", resp.StatusCode, oerr, err)
	}
}

// TestExtendedCardGRPC: the authenticated extended card over A2A's gRPC
// binding, with a2a-go's gRPC client and a bearer token: every skill,
// those that need scopes with them, as over JSON-RPC; without a good
// token, refused.
func TestExtendedCardGRPC(t *testing.T) {
	leaks := append(leakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, leaks...) })
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := identitySilo(t, p)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	card, err := (&agentcard.Resolver{Client: &http.Client{Transport: tr}}).Resolve(t.Context(), "http://"+s.A2AAddr(), agentcard.WithPath("/a2a/Payments/alice/p/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	extended := func(tok string) (*spec.AgentCard, error) {
		c, err := a2aclient.NewFromCard(t.Context(), card,
			a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearerCreds(tok))),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocolGRPC}}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Destroy()
		return c.GetExtendedAgentCard(t.Context(), &spec.GetExtendedAgentCardRequest{})
	}
	ext, err := extended(userToken(t, p, "alice", ""))
	if err != nil {
		t.Fatalf("the extended card over gRPC: %v", err)
	}
	var transfer *spec.AgentSkill
	for i := range ext.Skills {
		if ext.Skills[i].Name == "transfer" {
			transfer = &ext.Skills[i]
		}
	}
	if transfer == nil || len(transfer.SecurityRequirements) != 1 || !slices.Equal(transfer.SecurityRequirements[0]["oidc"], spec.SecuritySchemeScopes{"payments:write"}) {
		t.Fatalf("the extended card's transfer skill: %+v", transfer)
	}
	if ext.Name != card.Name || len(ext.SupportedInterfaces) == 0 {
		t.Fatalf("the extended card: %+v", ext)
	}
	if _, err := extended(badTokens(t, p)["expired"]); !errors.Is(err, spec.ErrUnauthenticated) {
		t.Fatalf("with an expired token: %v, want unauthenticated", err)
	}
}

// bearerCreds sends a bearer token with every gRPC call.
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return false }
