package a2a_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// Tasks are the cluster's: one started through silo 1 is read, listed,
// subscribed to and canceled through silo 2, and a silo that goes away
// leaves its tasks failed with the reason, not working.
func TestAcrossSilos(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "s1", "/x/", nil)
	s2 := startSilo(t, e, "s2", "/x/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)
	gc, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()

	for _, tr := range []string{"JSONRPC", "HTTP+JSON"} {
		t.Run(tr, func(t *testing.T) {
			c1 := dial(t, s1, "Block/dev/b", tr, dev)
			c2 := dial(t, s2, "Block/dev/b", tr, dev)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var id spec.TaskID
			final1 := make(chan spec.TaskState, 1)
			started := make(chan struct{})
			go func() {
				state := spec.TaskStateUnspecified
				for ev, err := range c1.SendStreamingMessage(ctx, text("wait")) {
					if err != nil {
						break
					}
					switch v := ev.(type) {
					case *spec.TaskStatusUpdateEvent:
						state = v.Status.State
						if v.Status.Message != nil && partsText(v.Status.Message.Parts) == "started" {
							id = v.TaskID
							close(started)
						}
					}
				}
				final1 <- state
			}()
			<-started

			got, err := c2.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
			if err != nil || got.Status.State != spec.TaskStateWorking {
				t.Fatalf("get through s2: %v %v", got, err)
			}
			list, err := c2.ListTasks(t.Context(), &spec.ListTasksRequest{Status: spec.TaskStateWorking})
			if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != id {
				t.Fatalf("list through s2: %+v %v", list, err)
			}
			// Subscribe through s2: the snapshot, then what follows.
			sub := make(chan []spec.TaskState, 1)
			subscribed := make(chan struct{})
			go func() {
				var states []spec.TaskState
				for ev, err := range c2.SubscribeToTask(ctx, &spec.SubscribeToTaskRequest{ID: id}) {
					if err != nil {
						break
					}
					switch v := ev.(type) {
					case *spec.Task:
						states = append(states, v.Status.State)
						close(subscribed)
					case *spec.TaskStatusUpdateEvent:
						states = append(states, v.Status.State)
					}
				}
				sub <- states
			}()
			<-subscribed
			// Cancel through s2 the turn that runs on s1.
			task, err := c2.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: id})
			if err != nil || task.Status.State != spec.TaskStateCanceled {
				t.Fatalf("cancel through s2: %v %v", task, err)
			}
			if st := <-final1; st != spec.TaskStateCanceled {
				t.Fatalf("the stream through s1 ended in %s", st)
			}
			if states := <-sub; len(states) < 2 || states[0] != spec.TaskStateWorking || states[len(states)-1] != spec.TaskStateCanceled {
				t.Fatalf("subscription through s2: %v", states)
			}
			// The turn's context was cancelled if the agent lives on s1;
			// the transport does not carry a cancel to an agent on
			// another silo, whose turn runs on: end it.
			release(t, gc)
			// A completed task too.
			e1 := dial(t, s1, "Echo/dev/e", tr, dev)
			e2 := dial(t, s2, "Echo/dev/e", tr, dev)
			done := asTask(e1.SendMessage(t.Context(), text("x")))
			got, err = e2.GetTask(t.Context(), &spec.GetTaskRequest{ID: done.ID})
			if err != nil || artifactText(got) != "x" {
				t.Fatalf("completed task through s2: %v %v", got, err)
			}
		})
	}

	// A silo whose lease ends (as when it is killed) leaves its turns'
	// tasks failed, with the reason, by the others.
	c1 := dial(t, s1, "Block/dev/gone", "JSONRPC", dev)
	c2 := dial(t, s2, "Block/dev/gone", "JSONRPC", dev)
	var id spec.TaskID
	for ev, err := range c1.SendStreamingMessage(t.Context(), text("wait")) {
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := ev.(*spec.TaskStatusUpdateEvent); ok && v.Status.Message != nil && partsText(v.Status.Message.Parts) == "started" {
			id = v.TaskID
			break
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(t.Context(), "/x/a2a/ctl/silos/s1")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("s1's key: %v %v", r, err)
	}
	lease, _ := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s2 to fail the task of s1's turn", func() bool {
		got, err := c2.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
		return err == nil && got.Status.State == spec.TaskStateFailed && strings.Contains(statusText(got), "silo s1 stopped")
	})
	// The turn itself ends when released; its late result does not
	// overwrite the failure.
	release(t, gc)
	got, err := c1.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
	if err != nil || got.Status.State != spec.TaskStateFailed {
		t.Fatalf("after the release: %v %v", got, err)
	}
}

// release ends the blocked turns of owner dev (Block agents in this
// process).
func release(t *testing.T, gc *client.Client) {
	t.Helper()
	if _, err := gc.Ask(t.Context(), "Block:dev:gate", &client.Message{Message: "release"}); err != nil {
		t.Fatal(err)
	}
}

// A silo that shuts down with a turn still running gives the turn until
// its shutdown deadline, then fails the task with the reason.
func TestShutdownMidTurn(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "s1", "/down/", nil)
	s2 := startSilo(t, e, "s2", "/down/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	c1 := dial(t, s1, "Block/dev/down", "JSONRPC", dev)
	c2 := dial(t, s2, "Block/dev/down", "JSONRPC", dev)
	var id spec.TaskID
	for ev, err := range c1.SendStreamingMessage(t.Context(), text("wait")) {
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := ev.(*spec.TaskStatusUpdateEvent); ok && v.Status.Message != nil && partsText(v.Status.Message.Parts) == "started" {
			id = v.TaskID
			break
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	closedEarly[s1] = true
	err := s1.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "a2a: close: executions still running") {
		t.Fatalf("s1's close: %v, want the A2A execution it cut", err)
	}
	got, err := c2.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
	if err != nil || got.Status.State != spec.TaskStateFailed || !strings.Contains(statusText(got), "Unavailable: silo s1 shut down during the turn") {
		t.Fatalf("the task after s1's shutdown: %+v %v", got, err)
	}
	gc, err := client.Dial(t.Context(), []string{s2.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	release(t, gc)
}
