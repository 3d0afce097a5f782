package auditstore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/audit/auditstore"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	m := audit.NewMemory()
	conformance(t, m, func(p string, seq uint64) {
		m.Tamper(p, seq, func(r *audit.Record) { r.Detail = "changed" })
	})
}

func TestEtcdConformance(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	s := auditstore.NewEtcd(cli, "/conf/")
	conformance(t, s, func(p string, seq uint64) {
		// Change a record behind the log's back: its detail.
		k := s.RecordKey(p, seq)
		resp, err := cli.Get(t.Context(), k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v", k, err)
		}
		var r audit.Record
		if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
			t.Fatal(err)
		}
		r.Detail = "changed"
		b, _ := json.Marshal(r)
		if _, err := cli.Put(t.Context(), k, string(b)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPostgresConformance(t *testing.T) {
	url := pgtest.Start(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := auditstore.NewPostgres(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conformance(t, s, func(p string, seq uint64) {
		if _, err := pool.Exec(t.Context(), `UPDATE agentsilo_audit SET data = jsonb_set(data, '{detail}', '"changed"') WHERE partition = $1 AND seq = $2`, p, int64(seq)); err != nil {
			t.Fatal(err)
		}
	})
}

// conformance checks what every store promises through a Log: appends in
// parallel make unforked chains, a key is recorded once, a sweep keeps the
// rest verifiable, and a changed record is named by Verify (tamper changes
// partition p's record seq in the store).
func conformance(t *testing.T, st audit.Store, tamper func(p string, seq uint64)) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	log, err := audit.New(audit.Config{Store: st, Partitions: 4, Retention: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Two logs on one store, as two silos: they share partitions.
	log2, err := audit.New(audit.Config{Store: st, Partitions: 4, Retention: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	const agents, each = 8, 10
	var wg sync.WaitGroup
	errc := make(chan error, 2*agents*each)
	for a := range agents {
		for i := range each {
			for _, l := range []*audit.Log{log, log2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Both logs append every key: each must be written once.
					errc <- l.Append(ctx, audit.Record{Key: fmt.Sprintf("k/%d/%d", a, i), Kind: audit.KindToolCall, Agent: fmt.Sprintf("LLM:o:a%d", a), Skill: "t", Principal: "alice", OnBehalfOf: []string{"alice"}})
				}()
			}
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	recs, err := log.Query(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != agents*each {
		t.Fatalf("%d records, want %d (one per key)", len(recs), agents*each)
	}
	keys := map[string]bool{}
	for _, r := range recs {
		if keys[r.Key] {
			t.Fatalf("key %s recorded twice", r.Key)
		}
		keys[r.Key] = true
	}
	rep, err := log.Verify(ctx)
	if err != nil || !rep.OK || rep.Records != agents*each {
		t.Fatalf("Verify = %+v, %v; want ok over %d records", rep, err, agents*each)
	}
	// Filters.
	one, err := log.Query(ctx, audit.Filter{Agent: "LLM:o:a3"})
	if err != nil || len(one) != each {
		t.Fatalf("Query(agent) = %d records, %v; want %d", len(one), err, each)
	}
	if got, _ := log.Query(ctx, audit.Filter{Principal: "bob"}); len(got) != 0 {
		t.Fatalf("Query(principal bob) = %d records, want 0", len(got))
	}
	if got, _ := log.Query(ctx, audit.Filter{Limit: 5}); len(got) != 5 {
		t.Fatalf("Query(limit 5) = %d records", len(got))
	}

	// Retention: the old records go, new ones stay, and the chains still
	// verify from their anchors.
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if err := log.Append(ctx, audit.Record{Key: "late", Kind: audit.KindACL, Agent: "LLM:o:a3"}); err != nil {
		t.Fatal(err)
	}
	n, err := log.Sweep(ctx)
	if err != nil || n != agents*each {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, agents*each)
	}
	rep, err = log.Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 1 {
		t.Fatalf("Verify after sweep = %+v, %v; want ok over 1 record", rep, err)
	}
	for i := range 5 {
		if err := log.Append(ctx, audit.Record{Key: fmt.Sprintf("after/%d", i), Kind: audit.KindToolCall, Agent: "LLM:o:a3"}); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ = log.Query(ctx, audit.Filter{Agent: "LLM:o:a3"})
	if len(recs) != 6 {
		t.Fatalf("%d records after the sweep, want 6", len(recs))
	}
	rep, err = log.Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}

	// A record changed in the store is named.
	victim := recs[3]
	tamper(victim.Partition, victim.Seq)
	rep, err = log.Verify(ctx)
	if err != nil || rep.OK || rep.Bad == nil || rep.Bad.Partition != victim.Partition || rep.Bad.Seq != victim.Seq {
		t.Fatalf("Verify after a change = %+v, %v; want record %s/%d named", rep, err, victim.Partition, victim.Seq)
	}
	if !strings.Contains(rep.Reason, "changed") {
		t.Fatalf("reason %q", rep.Reason)
	}

	// Export.
	var b bytes.Buffer
	if err := audit.WriteJSONLines(&b, recs); err != nil || strings.Count(b.String(), "\n") != len(recs) {
		t.Fatalf("JSON lines: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := audit.WriteOTLPJSON(&b, recs); err != nil {
		t.Fatal(err)
	}
	var otlp struct {
		ResourceLogs []struct {
			ScopeLogs []struct {
				LogRecords []struct {
					TimeUnixNano string `json:"timeUnixNano"`
				} `json:"logRecords"`
			} `json:"scopeLogs"`
		} `json:"resourceLogs"`
	}
	if err := json.Unmarshal(b.Bytes(), &otlp); err != nil || len(otlp.ResourceLogs[0].ScopeLogs[0].LogRecords) != len(recs) {
		t.Fatalf("OTLP/JSON: %v\n%s", err, b.String())
	}
}
