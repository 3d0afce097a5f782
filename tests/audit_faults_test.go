package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/audit/auditstore"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
	fakemodel "github.com/agentsilo/agentsilo/llm/llmtest"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestAuditCompleteUnderFaults: model agents' turns under load, each
// making one tool call (the typed skill add of the test agent Tally, a
// count in the state store added to once per idempotency key), while the
// leader of a three-member etcd is killed twice and a silo is killed
// (kill -9). Every turn's key is asked again until it is answered. Then
// every tool call that happened has exactly one audit record, and none
// that did not: the records that say the call succeeded are at most
// Tally's count, and all records at least it (a call whose Ask failed may
// or may not have run: its record says error); no turn has two records;
// and the chains verify.
func TestAuditCompleteUnderFaults(t *testing.T) {
	e := testcluster.StartEtcd(t, 3)
	c := testcluster.Start(t, testcluster.Options{Silos: 3, EtcdEndpoints: e.Endpoints(), Args: []string{"--llm-allow-private-networks"}})
	const tally = "Tally:test:audited"
	srv := fakemodel.NewFunc(fakemodel.Loop{Tool: "Tally_add", Arguments: `{"agent": "audited", "input": {"n": 1, "hold": false}}`}.Respond)
	defer srv.Close()
	admin := dialAs(t, c, "system")
	def := fmt.Sprintf("type: Auditee\ndescription: Adds to a tally when asked.\nmodel: {provider: openai, base_url: %s, name: fake-1}\ntools:\n  - agent: Tally\n", srv.OpenAIURL())
	if a, err := admin.Admin().ApplyType(t.Context(), []byte(def)); err != nil || len(a.Unconfirmed) != 0 {
		t.Fatalf("apply: %+v, %v", a, err)
	}

	const workers = 4
	var answered atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var failMu sync.Mutex
	var failures []string
	for w := range workers {
		var order []int
		for j := range c.Len() {
			order = append(order, (w+j)%c.Len())
		}
		cl := c.Client(t, order...)
		agent := fmt.Sprintf("Auditee:test:w%d", w)
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("w%d-%d", w, n)
				// A key is asked until it is answered, past the stop too:
				// every turn ends, so every tool call's record is written.
				deadline := time.Now().Add(2 * time.Minute)
				for {
					cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					r, err := cl.Ask(cctx, agent, &client.Message{Message: "add one", IdempotencyKey: key})
					cancel()
					if err == nil && strings.HasPrefix(r.Message, "done: ") {
						answered.Add(1)
						break
					}
					if time.Now().After(deadline) {
						failMu.Lock()
						failures = append(failures, fmt.Sprintf("key %s of %s: %+v, %v", key, agent, r, err))
						failMu.Unlock()
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	waitTurns := func(n int64) {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("%d turns answered", n), func() bool { return answered.Load() >= n })
	}
	waitTurns(20)
	for round := range 2 {
		leader := e.Leader()
		t.Logf("round %d: kill -9 the etcd leader (member %d) at %d turns", round+1, leader, answered.Load())
		e.Kill(leader)
		e.Leader()
		waitTurns(answered.Load() + 20)
		e.Restart(leader)
		waitTurns(answered.Load() + 10)
	}
	victim := c.Live()[0]
	t.Logf("kill -9 silo %s at %d turns", c.Names()[victim], answered.Load())
	c.Kill(victim)
	c.WaitGone(c.Names()[victim])
	waitTurns(answered.Load() + 20)
	stop()
	wg.Wait()
	for _, f := range failures {
		t.Errorf("%s", f)
	}

	admin = dialAs(t, c, "system") // the live silos
	count, err := c.Client(t, c.Live()...).Ask(t.Context(), tally, &client.Message{MessageType: "count", DataType: "application/json", Data: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	var sum struct{ Count int64 }
	if err := json.Unmarshal(count.Data, &sum); err != nil {
		t.Fatal(err)
	}
	recs, err := admin.Audit().Records(t.Context(), client.AuditFilter{Kind: "tool_call"})
	if err != nil {
		t.Fatal(err)
	}
	ok, perTurn := 0, map[string]int{}
	for _, r := range recs {
		if !strings.HasPrefix(r.Agent, "Auditee:") {
			continue
		}
		if r.Outcome == "ok" {
			ok++
		}
		perTurn[r.Agent+"/"+r.Task]++
		if perTurn[r.Agent+"/"+r.Task] > 1 {
			t.Errorf("turn %s of %s has two tool call records", r.Task, r.Agent)
		}
		if r.Principal == "" || r.Skill != "Tally_add" {
			t.Errorf("record %+v: want a principal and skill Tally_add", r)
		}
	}
	all := len(perTurn)
	t.Logf("%d turns answered, Tally's count %d, %d tool call records (%d ok), %d model requests", answered.Load(), sum.Count, all, ok, srv.Served())
	if int64(ok) > sum.Count || int64(all) < sum.Count {
		t.Errorf("records: %d ok of %d; Tally's count %d: want ok <= count <= all, a record for each call that happened and none for one that did not", ok, all, sum.Count)
	}
	if int64(all) < answered.Load() {
		t.Errorf("%d records for %d answered turns, each of which made its tool call", all, answered.Load())
	}
	rep, err := admin.Audit().Verify(t.Context())
	if err != nil || !rep.OK {
		t.Fatalf("audit verify: %+v, %v", rep, err)
	}
	t.Logf("verify: %d records in %d partitions", rep.Records, rep.Partitions)

	// A record changed in etcd behind the log's back is named.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	victimRec := recs[len(recs)/2]
	key := auditstore.NewEtcd(cli, c.EtcdPrefix()).RecordKey(victimRec.Partition, victimRec.Seq)
	changed := victimRec
	changed.Outcome = "error"
	if changed.Outcome == victimRec.Outcome {
		changed.Outcome = "ok"
	}
	b, _ := json.Marshal(changed)
	if _, err := cli.Put(t.Context(), key, string(b)); err != nil {
		t.Fatal(err)
	}
	rep, err = admin.Audit().Verify(t.Context())
	if err != nil || rep.OK || rep.Bad == nil || rep.Bad.Partition != victimRec.Partition || rep.Bad.Seq != victimRec.Seq {
		t.Fatalf("verify after a record changed: %+v, %v; want record %s/%d named", rep, err, victimRec.Partition, victimRec.Seq)
	}
	t.Logf("verify after a record changed: %s/%d: %s", rep.Bad.Partition, rep.Bad.Seq, rep.Reason)
}
