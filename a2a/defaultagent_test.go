package a2a_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/inbox"
)

// With a default agent, the host root's card is that agent's card, with
// its interfaces, so a client given only the host can call it; an address
// that does not parse, or of a type not registered, is refused.
func TestDefaultAgentCard(t *testing.T) {
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	rt, err := grain.New(grain.DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	deps := a2a.Deps{Runtime: rt, Etcd: etcdtest.Start(t).Client(t), Prefix: "/default/"}
	inbox.Wire(&deps, inbox.New("s1", nil))
	newServer := func(agent string) (*a2a.Server, error) {
		cfg := a2a.DefaultConfig()
		cfg.DefaultAgent = agent
		return a2a.New(cfg, deps)
	}
	rootCard := func(s *a2a.Server) *spec.AgentCard {
		t.Helper()
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/.well-known/agent-card.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var card spec.AgentCard
		if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
			t.Fatal(err)
		}
		return &card
	}

	s, err := newServer("Echo:acme:front")
	if err != nil {
		t.Fatal(err)
	}
	card := rootCard(s)
	if card.Name != "Echo:acme:front" || len(card.SupportedInterfaces) != 4 ||
		!strings.HasSuffix(card.SupportedInterfaces[0].URL, "/a2a/Echo/acme/front") || !strings.Contains(card.Description, "default agent") {
		t.Fatalf("root card with a default agent: %+v", card)
	}

	s, err = newServer("")
	if err != nil {
		t.Fatal(err)
	}
	if card := rootCard(s); card.Name != "agentsilo" || len(card.SupportedInterfaces) != 0 {
		t.Fatalf("root card without one: %+v", card)
	}

	for _, bad := range []string{"Echo", "No:such:type"} {
		if _, err := newServer(bad); errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "default agent") {
			t.Fatalf("default agent %q: %v, want InvalidArgument", bad, err)
		}
	}
}

// A silo with --a2a-default-agent: a client given only the host resolves
// the root card and calls that agent through it.
func TestDefaultAgentThroughHost(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/default-host/", func(c *cluster.SiloConfig) { c.A2A.DefaultAgent = "Echo:dev:front" })
	hc := httpClient(t, map[string]string{"x-agentsilo-principal": "dev"})
	card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), "http://"+s.A2AAddr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if task := taskOf(t)(c.SendMessage(t.Context(), text("hi host"))); artifactText(task) != "hi host" {
		t.Fatalf("through the host's card: %q", artifactText(task))
	}
}
