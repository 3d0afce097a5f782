package a2a_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// An outside A2A client calls an agent of the A2A type through the silo's
// own A2A endpoint (/a2a/A2A/{owner}/{alias}), as the root card advertises
// the directory's outside agents: the agent starts and continues the
// remote task, not the task of the endpoint the client's message made
// (whose ids it is given too): one answer, three turns of questions
// answered on the client's task, a cancel of the client's task that
// cancels the remote one; through each transport, to a remote that
// streams, and through JSON-RPC to one that must be polled.
func TestRemoteThroughEndpoint(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/through/", func(c *cluster.SiloConfig) { c.A2A.AllowPrivateNetworks = true })
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	streams := outside.Start(true)
	defer streams.Close()
	polled := outside.Start(false)
	defer polled.Close()

	// The directory's entry, as the root card advertises it.
	if _, err := s.Directory().Add(t.Context(), directory.Spec{Name: "ext", Kind: grain.KindA2A, URL: streams.URL}); err != nil {
		t.Fatal(err)
	}
	endpoint := ""
	waitFor(t, "the root card advertising the outside agent ext", func() bool {
		resp, err := httpClient(t, nil).Get("http://" + s.A2AAddr() + "/.well-known/agent-card.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var card spec.AgentCard
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&card) != nil {
			t.Fatalf("root card: %s", resp.Status)
		}
		for _, sk := range card.Skills {
			if _, call, ok := strings.Cut(sk.Description, "through this cluster: "); ok && strings.HasPrefix(sk.ID, "outside/ext/") {
				endpoint = strings.ReplaceAll(strings.TrimSuffix(call, ")"), ":", "/")
				return true
			}
		}
		return false
	})
	if endpoint != "A2A/{owner}/ext" {
		t.Fatalf("the root card calls the outside agent through %q", endpoint)
	}
	endpoint = strings.Replace(endpoint, "{owner}", "dev", 1)

	// An agent the program created, on a remote that does not stream
	// (polled every 100 ms).
	gw, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if _, err := gw.Agents().Create(t.Context(), "A2A:dev:made", map[string]string{a2a.ConfigCardURL: polled.CardURL(), a2a.ConfigPollMin: "100ms", a2a.ConfigPollMax: "100ms"}); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, agent, tr string, remote *outside.Server) {
		c := dial(t, s, agent, tr, dev)
		asTask := taskOf(t)

		task := asTask(c.SendMessage(t.Context(), text("hello")))
		if task.Status.State != spec.TaskStateCompleted || replyText(task) != "hello" {
			t.Fatalf("one answer: %s %q %q", task.Status.State, statusText(task), replyText(task))
		}

		// Questions: each answer on the client's task reaches the same
		// remote task.
		task = asTask(c.SendMessage(t.Context(), text("ask 2")))
		for i, answer := range []string{"a1", "a2"} {
			want := []string{"question 1 of 2?", "question 2 of 2?"}[i]
			if task.Status.State != spec.TaskStateInputRequired || statusText(task) != want {
				t.Fatalf("question %d: %s %q %q", i+1, task.Status.State, statusText(task), replyText(task))
			}
			st := stateOf(task.Status.Message)
			if st[a2a.StateRemoteTaskID] == "" || st[a2a.StateRemoteTaskID] == string(task.ID) || remote.Turns(spec.TaskID(st[a2a.StateRemoteTaskID])) != i+1 {
				t.Fatalf("question %d: the reply's state %v (the client's task %s)", i+1, st, task.ID)
			}
			next := asTask(c.SendMessage(t.Context(), follow(task, answer)))
			if next.ID != task.ID {
				t.Fatalf("answer %d made task %s, want %s", i+1, next.ID, task.ID)
			}
			task = next
		}
		if task.Status.State != spec.TaskStateCompleted || replyText(task) != "answers: a1; a2" {
			t.Fatalf("after the answers: %s %q %q", task.Status.State, statusText(task), replyText(task))
		}
	}
	for _, tr := range transports {
		t.Run("directory entry over "+tr, func(t *testing.T) { run(t, endpoint, tr, streams) })
	}
	t.Run("created agent, polled, over JSONRPC", func(t *testing.T) { run(t, "A2A/dev/made", "JSONRPC", polled) })

	// Cancelling the client's task cancels the remote task it runs.
	t.Run("cancel", func(t *testing.T) {
		c := dial(t, s, endpoint, "JSONRPC", dev)
		before := len(streams.Canceled())
		var id spec.TaskID
		for ev, err := range c.SendStreamingMessage(t.Context(), &spec.SendMessageRequest{Message: spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("slow never"))}) {
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if u, ok := ev.(*spec.TaskStatusUpdateEvent); ok && u.Status.Message != nil && partsText(u.Status.Message.Parts) == "started" {
				id = u.TaskID
				break // the remote task is working
			}
		}
		if id == "" {
			t.Fatal("the stream ended before the remote task started")
		}
		got, err := c.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: id})
		if err != nil || got.Status.State != spec.TaskStateCanceled {
			t.Fatalf("cancel: %v %v", got, err)
		}
		waitFor(t, "the remote task cancelled", func() bool { return len(streams.Canceled()) == before+1 })
	})
}

// replyText is the text of a task's artifact "reply" (the agent's reply;
// the A2A type's streamed artifact chunks come before it).
func replyText(task *spec.Task) string {
	for _, a := range task.Artifacts {
		if a.Name == "reply" {
			return partsText(a.Parts)
		}
	}
	return ""
}

// stateOf is the agent's state on a status message or artifact
// (metadata agentsilo.state).
func stateOf(m *spec.Message) map[string]string {
	out := map[string]string{}
	if m == nil {
		return out
	}
	st, _ := m.Metadata["agentsilo.state"].(map[string]any)
	for k, v := range st {
		out[k], _ = v.(string)
	}
	return out
}
