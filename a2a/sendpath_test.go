package a2a_test

import (
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// A blocking send's new task (the executor's fast path, see sendState):
// its result is durable when returned; while its turn runs it is stored
// working and is listed, subscribed to and cancelled through another silo
// like any task; its end is then one more write (the SDK's first write of
// it updates the executor's).
func TestBlockingSendFastPath(t *testing.T) {
	e := etcdtest.Start(t)
	s1 := startSilo(t, e, "s1", "/fast/", nil)
	s2 := startSilo(t, e, "s2", "/fast/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	gc, err := client.Dial(t.Context(), []string{s1.GatewayAddr()}, client.WithPrincipal("dev"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// writes is how many times the task id of agent was written.
	writes := func(agent string, id spec.TaskID) int64 {
		t.Helper()
		r, err := cli.Get(t.Context(), "/fast/a2a/tasks/"+agent+"/dev/"+string(id))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("task %s: %v %v", id, r, err)
		}
		return r.Kvs[0].Version
	}
	asTask := taskOf(t)
	type result struct {
		res spec.SendMessageResult
		err error
	}
	for _, tr := range []string{"JSONRPC", "HTTP+JSON"} {
		t.Run(tr, func(t *testing.T) {
			e1 := dial(t, s1, "Echo/dev/fast", tr, dev)
			e2 := dial(t, s2, "Echo/dev/fast", tr, dev)
			done := asTask(e1.SendMessage(t.Context(), text("x")))
			got, err := e2.GetTask(t.Context(), &spec.GetTaskRequest{ID: done.ID})
			if err != nil || got.Status.State != spec.TaskStateCompleted || artifactText(got) != "x" {
				t.Fatalf("the completed task through s2: %v %v", got, err)
			}
			// Its working state is written unless the turn ended first.
			if n := writes("Echo:dev:fast", done.ID); n < 1 || n > 2 {
				t.Fatalf("the task was written %d times", n)
			}

			b1 := dial(t, s1, "Block/dev/fast", tr, dev)
			b2 := dial(t, s2, "Block/dev/fast", tr, dev)
			for _, end := range []string{"release", "cancel"} {
				for _, msg := range []string{"quiet", "wait"} {
					req := text(msg)
					req.Message.ContextID = spec.NewContextID()
					res := make(chan result, 1)
					go func() {
						r, err := b1.SendMessage(t.Context(), req)
						res <- result{r, err}
					}()
					var id spec.TaskID
					waitFor(t, "the task listed working through s2", func() bool {
						l, err := b2.ListTasks(t.Context(), &spec.ListTasksRequest{ContextID: req.Message.ContextID, Status: spec.TaskStateWorking})
						if err != nil || len(l.Tasks) != 1 {
							return false
						}
						id = l.Tasks[0].ID
						return true
					})
					if end == "cancel" {
						task, err := b2.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: id})
						if err != nil || task.Status.State != spec.TaskStateCanceled {
							t.Fatalf("%s: cancel through s2: %v %v", msg, task, err)
						}
						r := <-res
						if task := asTask(r.res, r.err); task.ID != id || task.Status.State != spec.TaskStateCanceled {
							t.Fatalf("%s: the blocking send's result: %s %s", msg, task.ID, task.Status.State)
						}
						continue
					}
					// Subscribed through s2: the working snapshot, then the end.
					states := make(chan []spec.TaskState, 1)
					subscribed := make(chan struct{})
					go func() {
						var got []spec.TaskState
						for ev, err := range b2.SubscribeToTask(t.Context(), &spec.SubscribeToTaskRequest{ID: id}) {
							if err != nil {
								break
							}
							switch v := ev.(type) {
							case *spec.Task:
								got = append(got, v.Status.State)
							case *spec.TaskStatusUpdateEvent:
								got = append(got, v.Status.State)
							}
							if len(got) == 1 {
								close(subscribed)
							}
						}
						states <- got
					}()
					<-subscribed
					release(t, gc)
					r := <-res
					task := asTask(r.res, r.err)
					if task.ID != id || task.Status.State != spec.TaskStateCompleted || artifactText(task) != "released" {
						t.Fatalf("%s: the blocking send's result: %s %s %q", msg, task.ID, task.Status.State, artifactText(task))
					}
					if got := <-states; len(got) < 2 || got[0] != spec.TaskStateWorking || got[len(got)-1] != spec.TaskStateCompleted {
						t.Fatalf("%s: subscription through s2: %v", msg, got)
					}
					got, err := b2.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
					if err != nil || got.Status.State != spec.TaskStateCompleted || artifactText(got) != "released" {
						t.Fatalf("%s: the task through s2: %v %v", msg, got, err)
					}
					if n := writes("Block:dev:fast", id); msg == "quiet" && n != 2 {
						t.Fatalf("the quiet task was written %d times; want 2 (working, then its end)", n)
					}
				}
			}
		})
	}
}
