package a2a_test

import (
	"fmt"
	"sync"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// TestAuditA2ATasks: blocking sends to four agents, four callers at once
// (the fast path, where a task's one write carries its audit record):
// every completed task has exactly one a2a_task record, naming the task,
// its agent and its caller, and the chains verify.
func TestAuditA2ATasks(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/a2a-audit/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}
	const agents, each = 4, 6
	tasks := make([][]string, agents)
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i := range agents {
		cl := dial(t, s, fmt.Sprintf("Echo/dev/au%d", i), "JSONRPC", dev)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := cl.SendMessage(t.Context(), text("ping"))
				task, ok := res.(*spec.Task)
				if err != nil || !ok || task.Status.State != spec.TaskStateCompleted {
					errs <- fmt.Errorf("send to au%d: %v: %w", i, res, err)
					return
				}
				tasks[i] = append(tasks[i], string(task.ID))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sys, err := client.Dial(t.Context(), []string{s.GatewayAddr()}, client.WithPrincipal("system"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	var recs []audit.Record
	waitFor(t, "a record of each task", func() bool {
		recs, err = sys.Audit().Records(t.Context(), client.AuditFilter{Kind: audit.KindA2ATask})
		return err == nil && len(recs) >= agents*each
	})
	byTask := map[string][]audit.Record{}
	for _, r := range recs {
		byTask[r.Task] = append(byTask[r.Task], r)
	}
	for i, ids := range tasks {
		for _, id := range ids {
			rs := byTask[id]
			if len(rs) != 1 || rs[0].Agent != fmt.Sprintf("Echo:dev:au%d", i) || rs[0].Principal != "dev" || rs[0].Outcome != audit.OutcomeOK {
				t.Fatalf("the records of task %s: %+v; want one, of Echo:dev:au%d for dev", id, rs, i)
			}
		}
	}
	if len(recs) != agents*each {
		t.Fatalf("%d records of %d tasks", len(recs), agents*each)
	}
	rep, err := sys.Audit().Verify(t.Context())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
