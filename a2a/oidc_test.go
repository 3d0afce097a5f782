package a2a_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/oidctest"
)

// TestOIDCBearer: a silo that takes an OpenID provider's tokens declares
// the provider in its cards; the A2A SDK's client, given a token through
// its own AuthInterceptor, is the token's subject on every transport; a
// token expired, not yet valid, forged, of an unknown key, for another
// audience or issuer, or unsigned is refused as unauthenticated, and the
// server goes on taking good ones, also after the provider rotates its
// key.
func TestOIDCBearer(t *testing.T) {
	p, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/oidc/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.OIDC.Issuer, c.Gateway.Auth.OIDC.Audience = p.Issuer(), "agentsilo"
	})

	resp, err := http.Get("http://" + s.A2AAddr() + "/a2a/Echo/alice/x/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var card struct {
		SecuritySchemes map[string]map[string]any `json:"securitySchemes"`
	}
	if err := json.Unmarshal(b, &card); err != nil || !strings.Contains(string(b), p.Issuer()+"/.well-known/openid-configuration") || card.SecuritySchemes["bearer"] == nil {
		t.Fatalf("card security: %s (%v)", b, err)
	}

	sign := func(c oidctest.Claims) string {
		tok, err := p.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := p.Standard("alice", "agentsilo", time.Hour)
	with := func(k string, v any) oidctest.Claims {
		c := oidctest.Claims{}
		for k, v := range good {
			c[k] = v
		}
		c[k] = v
		return c
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := oidctest.SignWith(other, "key-1", good)
	unknown, _ := oidctest.SignWith(other, "key-9", good)
	bad := map[string]string{
		"expired":        sign(with("exp", time.Now().Add(-time.Hour).Unix())),
		"not yet valid":  sign(with("nbf", time.Now().Add(time.Hour).Unix())),
		"forged":         forged,
		"unknown key":    unknown,
		"other audience": sign(with("aud", "other")),
		"other issuer":   sign(with("iss", "https://evil.example")),
		"alg none":       oidctest.Unsigned(good),
	}

	// dial makes a client of the A2A SDK that sends tok by the card's
	// bearer scheme, through the SDK's AuthInterceptor.
	dialToken := func(t *testing.T, transport, tok string) (*a2aclient.Client, a2aclient.SessionID) {
		t.Helper()
		hc := httpClient(t, nil)
		card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.A2AAddr(), agentcard.WithPath("/a2a/Echo/alice/x/.well-known/agent-card.json"))
		if err != nil {
			t.Fatal(err)
		}
		creds := a2aclient.NewInMemoryCredentialsStore()
		creds.Set("me", "bearer", a2aclient.AuthCredential(tok))
		c, err := a2aclient.NewFromCard(t.Context(), card,
			a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
			a2aclient.WithCallInterceptors(&a2aclient.AuthInterceptor{Service: creds}),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocol(transport)}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Destroy() })
		return c, "me"
	}
	asTask := taskOf(t)
	for _, tr := range []string{"JSONRPC", "HTTP+JSON"} {
		t.Run(tr, func(t *testing.T) {
			c, sid := dialToken(t, tr, sign(good))
			ctx := a2aclient.AttachSessionID(t.Context(), sid)
			task := asTask(c.SendMessage(ctx, text("hello")))
			if task.Status.State != spec.TaskStateCompleted {
				t.Fatalf("good token: %v", task.Status)
			}
			for name, tok := range bad {
				bc, sid := dialToken(t, tr, tok)
				_, err := bc.SendMessage(a2aclient.AttachSessionID(t.Context(), sid), text("hi"))
				if !isErr(err, spec.ErrUnauthenticated) && (tr == "HTTP+JSON" || err == nil || !strings.Contains(err.Error(), "401 Unauthorized")) {
					t.Errorf("%s: %v, want unauthenticated", name, err)
				}
			}
			asTask(c.SendMessage(ctx, text("still here")))
		})
	}
	// The provider rotates its key: a token of the new key is taken.
	if err := p.Rotate(); err != nil {
		t.Fatal(err)
	}
	c, sid := dialToken(t, "JSONRPC", sign(p.Standard("alice", "agentsilo", time.Hour)))
	asTask(c.SendMessage(a2aclient.AttachSessionID(t.Context(), sid), text("after the rotation")))
}
