package a2a_test

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// An agent of the built-in type A2A is a remote A2A agent: here agents
// of a second silo (another cluster, with API keys), reached through its
// A2A endpoint.
func TestRemoteAgentType(t *testing.T) {
	e := etcdtest.Start(t)
	remote := startSilo(t, e, "remote", "/remote/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: keyHash("carol-key"), Principal: "carol"}}
	})
	local := startSilo(t, e, "local", "/local/", func(c *cluster.SiloConfig) { c.A2A.AllowPrivateNetworks = true })
	guarded := startSilo(t, e, "guarded", "/guarded/", nil)

	var mu sync.Mutex
	var pushed []*client.Message
	c, err := client.Dial(t.Context(), []string{local.GatewayAddr()}, client.WithPrincipal("system"),
		client.WithOnMessage(func(m *client.Message) {
			mu.Lock()
			pushed = append(pushed, m)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	card := func(agent string) string {
		return "http://" + remote.A2AAddr() + "/a2a/" + agent + "/.well-known/agent-card.json"
	}
	create := func(c *client.Client, addr, agent string) {
		t.Helper()
		if _, err := c.Agents().Create(t.Context(), addr, map[string]string{a2a.ConfigCardURL: card(agent), a2a.ConfigAPIKey: "carol-key"}); err != nil {
			t.Fatal(err)
		}
	}

	// Streaming: the remote's updates are pushed to the caller, the
	// result is the reply.
	create(c, "A2A:system:weather", "Stream/carol/w")
	r, err := c.Ask(t.Context(), "A2A:system:weather", &client.Message{Message: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "chunk 1;\nchunk 2;\nstreamed 2" || r.State[a2a.StateTaskState] != "TASK_STATE_COMPLETED" || r.State[a2a.StateTaskID] == "" {
		t.Fatalf("reply: %q %v", r.Message, r.State)
	}
	waitFor(t, "the pushed updates", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var got []string
		for _, p := range pushed {
			got = append(got, p.MessageType+"="+p.Message)
		}
		return strings.Join(got, "|") == "progress=working on it|a2a.artifact=chunk 1;|a2a.artifact=chunk 2;|a2a.artifact=streamed 2"
	})

	// input-required: the reply says so; asking again with its state
	// continues the remote task, in the same context.
	create(c, "A2A:system:iv", "Interview/carol/i")
	r, err = c.Ask(t.Context(), "A2A:system:iv", &client.Message{Message: "hi"})
	if err != nil || r.MessageType != a2a.TypeInputRequired || r.Message != "what is your name?" {
		t.Fatalf("interview: %v %v", r, err)
	}
	r2, err := c.Ask(t.Context(), "A2A:system:iv", &client.Message{Message: "name Bo", State: r.State})
	if err != nil || r2.Message != "hello Bo (context "+r.State[a2a.StateContextID]+", turn 2)" || r2.State[a2a.StateTaskID] != r.State[a2a.StateTaskID] {
		t.Fatalf("interview answer: %v %v", r2, err)
	}

	// The remote's failures keep their reason.
	create(c, "A2A:system:fail", "Fail/carol/f")
	for text, code := range map[string]codes.Code{"Unavailable": codes.Unknown, "InvalidArgument": codes.FailedPrecondition} {
		_, err := c.Ask(t.Context(), "A2A:system:fail", &client.Message{Message: text})
		if status.Code(err) != code || !strings.Contains(err.Error(), "failing with "+text+" as asked") {
			t.Errorf("%s: %v, want %s", text, err, code)
		}
	}
	// Wrong credentials, no configuration.
	if _, err := c.Agents().Create(t.Context(), "A2A:system:nokey", map[string]string{a2a.ConfigCardURL: card("Echo/carol/e")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ask(t.Context(), "A2A:system:nokey", &client.Message{Message: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the key: %v", err)
	}
	if _, err := c.Ask(t.Context(), "A2A:system:none", &client.Message{Message: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("without configuration: %v", err)
	}

	// A silo with the SSRF guard on does not reach loopback.
	g, err := client.Dial(t.Context(), []string{guarded.GatewayAddr()}, client.WithPrincipal("system"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	create(g, "A2A:system:weather", "Stream/carol/w")
	if _, err := g.Ask(t.Context(), "A2A:system:weather", &client.Message{Message: "1"}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "internal") {
		t.Errorf("to loopback through the guard: %v", err)
	}
}
