package a2a_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/a2a/a2atest"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// TestMain checks that no test leaves a goroutine behind once its silos
// closed (they close at each test's cleanup, after the test's own defers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.LeakOptions()...)
}

// startSilo starts an in-process silo with the demo and test agents and
// A2A on a free loopback port, on the etcd of e under prefix; configure
// may adjust its config. It is closed at the test's end.
func startSilo(t *testing.T, e *etcdtest.Server, name, prefix string, configure func(*cluster.SiloConfig)) *cluster.Silo {
	t.Helper()
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := a2atest.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testutil.Logger()
	cfg.A2A.Addr = "127.0.0.1:0"
	if configure != nil {
		configure(&cfg)
	}
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil && !closedEarly[s] {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return s
}

// closedEarly marks the silos a test closed itself, whose Close error
// the test judged.
var closedEarly = map[*cluster.Silo]bool{}

// headers is an http.RoundTripper adding fixed headers (a principal, a key).
type headers struct {
	base http.RoundTripper
	h    map[string]string
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// httpClient returns a client sending hdr, whose idle connections are
// closed at the test's end.
func httpClient(t *testing.T, hdr map[string]string) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: headers{base: tr, h: hdr}}
}

// transports are the ways a test reaches an agent.
var transports = []string{"JSONRPC", "HTTP+JSON", "JSONRPC-0.3"}

// dial resolves the card of agent (Type/owner/alias) at the silo and makes
// an SDK client for transport, sending hdr.
func dial(t *testing.T, s *cluster.Silo, agent, transport string, hdr map[string]string) *a2aclient.Client {
	t.Helper()
	hc := httpClient(t, hdr)
	base := "http://" + s.A2AAddr()
	card, err := (&agentcard.Resolver{Client: hc}).Resolve(t.Context(), base, agentcard.WithPath("/a2a/"+agent+"/.well-known/agent-card.json"))
	if err != nil {
		t.Fatalf("card of %s: %v", agent, err)
	}
	var c *a2aclient.Client
	switch transport {
	case "JSONRPC-0.3":
		c, err = a2aclient.NewFromEndpoints(t.Context(), []*spec.AgentInterface{card.SupportedInterfaces[2]},
			a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}))
	default:
		c, err = a2aclient.NewFromCard(t.Context(), card,
			a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocol(transport)}}))
	}
	if err != nil {
		t.Fatalf("client for %s over %s: %v", agent, transport, err)
	}
	t.Cleanup(func() { c.Destroy() })
	return c
}

func text(s string) *spec.SendMessageRequest {
	return &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart(s))}
}

// follow is a message on task.
func follow(task *spec.Task, s string) *spec.SendMessageRequest {
	m := spec.NewMessageForTask(spec.MessageRoleUser, task, spec.NewTextPart(s))
	return &spec.SendMessageRequest{Message: m}
}

// taskOf returns a func giving the task a send resulted in, failing t
// otherwise.
func taskOf(t *testing.T) func(spec.SendMessageResult, error) *spec.Task {
	return func(res spec.SendMessageResult, err error) *spec.Task {
		t.Helper()
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		task, ok := res.(*spec.Task)
		if !ok {
			t.Fatalf("send: got %T, want a task", res)
		}
		return task
	}
}

// statusText is the text of a task's status message.
func statusText(task *spec.Task) string {
	if task.Status.Message == nil {
		return ""
	}
	return partsText(task.Status.Message.Parts)
}

func partsText(parts spec.ContentParts) string {
	s := ""
	for _, p := range parts {
		s += p.Text()
	}
	return s
}

// artifactText joins the text of a task's artifacts.
func artifactText(task *spec.Task) string {
	s := ""
	for _, a := range task.Artifacts {
		s += partsText(a.Parts)
	}
	return s
}

// waitFor waits for cond (testutil.WaitFor).
func waitFor(t *testing.T, what string, cond func() bool) { testutil.WaitFor(t, what, cond) }

// isErr reports whether err is (wraps) target.
func isErr(err, target error) bool { return errors.Is(err, target) }
