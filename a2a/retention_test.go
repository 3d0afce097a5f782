package a2a_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// With a short retention, finished tasks (completed, canceled) and their
// push configs leave etcd, and a read is TaskNotFound; tasks still working
// or waiting for input are kept. The leases are checked first (which keys
// carry one, for how long), so the test does not depend on timing.
func TestTaskRetention(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "ret", "/ret/", func(c *cluster.SiloConfig) { c.A2A.TaskRetention = time.Second })
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	asTask := taskOf(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	echo := dial(t, s, "Echo/dev/r", "JSONRPC", dev)
	interview := dial(t, s, "Interview/dev/r", "JSONRPC", dev)
	block := dial(t, s, "Block/dev/r", "JSONRPC", dev)
	pushCfg := func(c interface {
		CreateTaskPushConfig(context.Context, *spec.PushConfig) (*spec.PushConfig, error)
	}, id spec.TaskID) {
		t.Helper()
		if _, err := c.CreateTaskPushConfig(t.Context(), &spec.PushConfig{TaskID: id, URL: "http://127.0.0.1:9/a2a", Token: "tok"}); err != nil {
			t.Fatalf("push config of %s: %v", id, err)
		}
	}

	// One push config saved with the send (before the task exists), one
	// after the end (on the task's lease).
	send := text("done soon")
	send.Config = &spec.SendMessageConfig{PushConfig: &spec.PushConfig{URL: "http://127.0.0.1:9/a2a"}}
	completed := asTask(echo.SendMessage(t.Context(), send))
	pushCfg(echo, completed.ID)
	waiting := asTask(interview.SendMessage(t.Context(), text("hello")))
	immediately := func(s string) *spec.SendMessageRequest {
		r := text(s)
		r.Config = &spec.SendMessageConfig{ReturnImmediately: true}
		return r
	}
	working := asTask(block.SendMessage(t.Context(), immediately("keep me")))
	canceled := asTask(block.SendMessage(t.Context(), immediately("cancel me")))
	pushCfg(block, canceled.ID) // saved while it works: put on the lease at its end
	if got, err := block.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: canceled.ID}); err != nil || got.Status.State != spec.TaskStateCanceled {
		t.Fatalf("cancel: %v, %v", got, err)
	}
	if completed.Status.State != spec.TaskStateCompleted || waiting.Status.State != spec.TaskStateInputRequired || working.Status.State != spec.TaskStateWorking {
		t.Fatalf("states %s %s %s", completed.Status.State, waiting.Status.State, working.Status.State)
	}

	// leaseOf returns the lease of the task id's key, and of its push
	// configs.
	leaseOf := func(id spec.TaskID) (task clientv3.LeaseID, pushes []clientv3.LeaseID, found bool) {
		t.Helper()
		r, err := cli.Get(t.Context(), "/ret/a2a/tasks/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+string(id)) {
				task, found = clientv3.LeaseID(kv.Lease), true
			}
		}
		p, err := cli.Get(t.Context(), "/ret/a2a/push/"+string(id)+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range p.Kvs {
			pushes = append(pushes, clientv3.LeaseID(kv.Lease))
		}
		return task, pushes, found
	}
	for _, id := range []spec.TaskID{waiting.ID, working.ID} {
		if l, _, found := leaseOf(id); !found || l != 0 {
			t.Fatalf("task %s, not finished: found %v, lease %x; want kept without a lease", id, found, l)
		}
	}
	for id, configs := range map[spec.TaskID]int{completed.ID: 2, canceled.ID: 1} {
		l, pushes, found := leaseOf(id)
		if !found || l == 0 || len(pushes) != configs || slices.ContainsFunc(pushes, func(p clientv3.LeaseID) bool { return p != l }) {
			// (A test this fast finds them before they expire; if the box
			// stalled past the retention they are gone, which the waits
			// below accept.)
			if found {
				t.Fatalf("finished task %s: lease %x, its push configs' %v; want one lease for all", id, l, pushes)
			}
			continue
		}
		ttl, err := cli.TimeToLive(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.GrantedTTL < 1 || ttl.GrantedTTL > 3 {
			t.Fatalf("lease of %s granted for %ds, want the retention (1s) and at most a window (1s) more", id, ttl.GrantedTTL)
		}
	}

	// The finished tasks go, with their push configs.
	get := func(c interface {
		GetTask(context.Context, *spec.GetTaskRequest) (*spec.Task, error)
	}, id spec.TaskID) (*spec.Task, error) {
		return c.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
	}
	waitFor(t, "the completed and canceled tasks to expire", func() bool {
		_, err1 := get(echo, completed.ID)
		_, err2 := get(block, canceled.ID)
		return isErr(err1, spec.ErrTaskNotFound) && isErr(err2, spec.ErrTaskNotFound)
	})
	for _, id := range []spec.TaskID{completed.ID, canceled.ID} {
		if _, pushes, found := leaseOf(id); found || len(pushes) != 0 {
			t.Fatalf("task %s expired, but found %v, %d push configs", id, found, len(pushes))
		}
	}
	if _, err := echo.ListTaskPushConfigs(t.Context(), &spec.ListTaskPushConfigRequest{TaskID: completed.ID}); !isErr(err, spec.ErrTaskNotFound) {
		t.Fatalf("push configs of an expired task: %v", err)
	}
	// The others are kept.
	if got, err := get(interview, waiting.ID); err != nil || got.Status.State != spec.TaskStateInputRequired {
		t.Fatalf("the input-required task: %v, %v", got, err)
	}
	if got, err := get(block, working.ID); err != nil || got.Status.State != spec.TaskStateWorking {
		t.Fatalf("the working task: %v, %v", got, err)
	}
	// Let the working turn end before the silo closes.
	asTask(dial(t, s, "Block/dev/gate", "JSONRPC", dev).SendMessage(t.Context(), text("release")))
	waitFor(t, "the working task to complete", func() bool {
		got, err := get(block, working.ID)
		return err == nil && got.Status.State == spec.TaskStateCompleted
	})
}
