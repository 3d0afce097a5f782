package a2a_test

import (
	"context"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// principal sends fixed metadata with every gRPC call.
type principal map[string]string

func (p principal) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return p, nil
}

func (principal) RequireTransportSecurity() bool { return false }

// dialGRPC makes an SDK client of agent over the gRPC binding its card
// declares, sending md.
func dialGRPC(t *testing.T, addr, agent string, md map[string]string) (*a2aclient.Client, *spec.AgentCard) {
	t.Helper()
	card, err := (&agentcard.Resolver{Client: httpClient(t, nil)}).Resolve(t.Context(), "http://"+addr, agentcard.WithPath("/a2a/"+agent+"/.well-known/agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card,
		a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(principal(md))),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []spec.TransportProtocol{spec.TransportProtocolGRPC}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() })
	return c, card
}

// The spec's gRPC binding is served on the A2A port and declared in the
// cards (the agent as the tenant): a2a-go's gRPC client sends, streams,
// gets, lists and cancels through it, the errors keep their kinds, the
// agent is the tenant's, and callers authenticate as on the other bindings.
func TestGRPCBinding(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/grpc/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	c, card := dialGRPC(t, s.A2AAddr(), "Echo/dev/g1", dev)
	var iface *spec.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == spec.TransportProtocolGRPC {
			iface = i
		}
	}
	if iface == nil || iface.URL != s.A2AAddr() || iface.Tenant != "Echo:dev:g1" {
		t.Fatalf("the card's gRPC interface: %+v, want %s with tenant Echo:dev:g1", iface, s.A2AAddr())
	}

	task := taskOf(t)(c.SendMessage(t.Context(), text("over gRPC")))
	if task.Status.State != spec.TaskStateCompleted || artifactText(task) != "over gRPC" {
		t.Fatalf("send: %s %q", task.Status.State, artifactText(task))
	}
	got, err := c.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID})
	if err != nil || artifactText(got) != "over gRPC" {
		t.Fatalf("get: %v %v", got, err)
	}
	list, err := c.ListTasks(t.Context(), &spec.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := c.GetTask(t.Context(), &spec.GetTaskRequest{ID: "no-such-task"}); !isErr(err, spec.ErrTaskNotFound) {
		t.Fatalf("get of an unknown task: %v", err)
	}
	if _, err := c.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: task.ID}); !isErr(err, spec.ErrTaskNotCancelable) {
		t.Fatalf("cancel of a completed task: %v", err)
	}
	if _, err := c.SendMessage(t.Context(), follow(task, "again")); !isErr(err, spec.ErrUnsupportedOperation) {
		t.Fatalf("message to a completed task: %v", err)
	}

	// Streaming, from the Stream demo agent.
	sc, _ := dialGRPC(t, s.A2AAddr(), "Stream/dev/g1", dev)
	var chunks string
	var final spec.TaskState
	for ev, err := range sc.SendStreamingMessage(t.Context(), text("2")) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch v := ev.(type) {
		case *spec.TaskArtifactUpdateEvent:
			chunks += partsText(v.Artifact.Parts)
		case *spec.TaskStatusUpdateEvent:
			final = v.Status.State
		}
	}
	if final != spec.TaskStateCompleted || !strings.Contains(chunks, "streamed 2") {
		t.Fatalf("stream: final %s, chunks %q", final, chunks)
	}

	// The tenant names the agent: another agent's tasks are not this one's.
	other, _ := dialGRPC(t, s.A2AAddr(), "Echo/dev/g2", dev)
	if _, err := other.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID}); !isErr(err, spec.ErrTaskNotFound) {
		t.Fatalf("another agent's task: %v", err)
	}

	// With API keys: a key as x-api-key or as a bearer token passes, a
	// wrong one or none is refused before anything runs.
	ks := startSilo(t, e, "s2", "/grpc-keys/", func(c *cluster.SiloConfig) {
		c.Gateway.Auth.Keys = []auth.APIKey{{SHA256: keyHash("alice-key"), Principal: "alice"}}
	})
	for _, md := range []map[string]string{{"x-api-key": "alice-key"}, {"authorization": "Bearer alice-key"}} {
		kc, _ := dialGRPC(t, ks.A2AAddr(), "Echo/alice/g1", md)
		if task := taskOf(t)(kc.SendMessage(t.Context(), text("keyed"))); artifactText(task) != "keyed" {
			t.Fatalf("with %v: %q", md, artifactText(task))
		}
	}
	for _, md := range []map[string]string{{}, {"x-api-key": "nope"}} {
		kc, _ := dialGRPC(t, ks.A2AAddr(), "Echo/alice/g1", md)
		if _, err := kc.SendMessage(t.Context(), text("hi")); !isErr(err, spec.ErrUnauthenticated) {
			t.Fatalf("with %v: %v, want Unauthenticated", md, err)
		}
	}
}
