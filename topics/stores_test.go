package topics

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/natstest"
	"github.com/agentsilo/agentsilo/internal/retry"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// The Service over etcd: fan-out, retries and dead letters end to end.
func TestServiceOnEtcd(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	store := topicstore.NewEtcdStore(cli, "/svc/", nil)
	h := newHarness(t, store)
	h.a.handle = func(m *grain.Message) error {
		if m.Message == "bad" {
			return grain.Poison("bad")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)
	h.subscribe(s, "W:acme:b", "two", "orders.*", 0)
	const n = 50
	var wg sync.WaitGroup
	for p := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 5 {
				h.publish(s, fmt.Sprintf("P:acme:p%d", p), "orders.new", fmt.Sprint(i))
			}
		}()
	}
	wg.Wait()
	h.publish(s, "P:acme:p", "orders.new", "bad")
	got := h.a.wait(t, "deliveries", func(got []*grain.Message) bool { return len(got) == 2*n+2 })
	last := map[string]int{}
	for _, m := range got {
		if m.Message == "bad" {
			continue
		}
		k := m.Subscription + " " + m.From
		var i int
		fmt.Sscan(m.Message, &i)
		if prev, ok := last[k]; ok && i != prev+1 {
			t.Fatalf("%s: %d after %d", k, i, prev)
		}
		last[k] = i
	}
	waitStats(t, s, "acks and dead letters", func(st Stats) bool { return st.Acked == 2*n && st.DeadLettered == 2 })
	if st := store.Txns(); st > 2*n+20 {
		t.Logf("%d transactions for %d publishes", st, n)
	}
}

// The Service over JetStream: fan-out, a publisher's order, retries and
// dead letters end to end.
func TestServiceOnJetStream(t *testing.T) {
	h := newHarness(t, jetStreamStore(t))
	h.a.handle = func(m *grain.Message) error {
		if m.Message == "bad" {
			return grain.Poison("bad")
		}
		return nil
	}
	s := h.service(nil)
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)
	h.subscribe(s, "W:acme:b", "two", "orders.*", 0)
	h.subscribe(s, "W:acme:c", "three", "invoices.*", 0)
	const n = 50
	var wg sync.WaitGroup
	for p := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 5 {
				h.publish(s, fmt.Sprintf("P:acme:p%d", p), "orders.new", fmt.Sprint(i))
			}
		}()
	}
	wg.Wait()
	h.publish(s, "P:acme:p", "orders.new", "bad")
	got := h.a.wait(t, "deliveries", func(got []*grain.Message) bool { return len(got) == 2*n+2 })
	last := map[string]int{}
	for _, m := range got {
		if m.To == "W:acme:c" {
			t.Fatalf("invoices.* got %v", m)
		}
		if m.Message == "bad" {
			continue
		}
		k := m.Subscription + " " + m.From
		var i int
		fmt.Sscan(m.Message, &i)
		if prev, ok := last[k]; ok && i != prev+1 {
			t.Fatalf("%s: %d after %d", k, i, prev)
		}
		last[k] = i
	}
	waitStats(t, s, "acks and dead letters", func(st Stats) bool { return st.Acked == 2*n && st.DeadLettered == 2 })
	ds, _, err := s.DeadLetters(t.Context(), "acme:one", "", 10)
	if err != nil || len(ds) != 1 || ds[0].GetReason() == "" {
		t.Fatalf("dead letters: %v %v", ds, err)
	}
}

// The NATS server is killed (SIGKILL) and restarted on its store while
// publishers publish: every publish that returned without error is
// delivered.
func TestJetStreamServerKilledUnderLoad(t *testing.T) {
	ns := natstest.Start(t)
	store := openJetStream(t, ns.URL())
	h := newHarness(t, store)
	s := h.service(func(c *Config) { c.clk = clock.Real{}; c.MaxBacklog = 100_000 })
	h.subscribe(s, "W:acme:a", "one", "orders.#", 0)

	var mu sync.Mutex
	acked := map[string]bool{}
	var failed int
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := retry.New(10*time.Millisecond, 200*time.Millisecond, nil)
			for i := 0; ctx.Err() == nil; i++ {
				text := fmt.Sprintf("p%d-%d", p, i)
				_, err := s.Publish(ctx, fmt.Sprintf("P:acme:p%d", p), "orders.new", &grain.Message{Message: text})
				mu.Lock()
				if err == nil {
					acked[text] = true
				} else if ctx.Err() == nil {
					failed++
				}
				mu.Unlock()
				if err != nil {
					b.Wait(ctx, nil)
				} else {
					b.Reset()
				}
			}
		}()
	}
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(acked), failed }
	testutil.WaitFor(t, "200 publishes", func() bool { n, _ := count(); return n >= 200 })
	ns.Kill()
	testutil.WaitFor(t, "publishes to fail", func() bool { _, f := count(); return f > 0 })
	before, _ := count()
	t0 := time.Now()
	ns.Restart()
	testutil.WaitFor(t, "200 more publishes after the restart", func() bool { n, _ := count(); return n >= before+200 })
	t.Logf("restart to 200 more publishes: %v", time.Since(t0))
	stop()
	wg.Wait()
	n, f := count()
	t.Logf("%d publishes acknowledged, %d failed while the server was away", n, f)
	h.a.wait(t, "every acknowledged publish delivered", func(got []*grain.Message) bool {
		seen := make(map[string]bool, len(got))
		for _, m := range got {
			seen[m.Message] = true
		}
		mu.Lock()
		defer mu.Unlock()
		for text := range acked {
			if !seen[text] {
				return false
			}
		}
		return true
	})
	t.Logf("restart to all delivered: %v", time.Since(t0))
}

// jetStreamStore returns a JetStreamStore on a nats-server of its own,
// closed when t ends.
func jetStreamStore(t *testing.T) *topicstore.JetStreamStore {
	t.Helper()
	ns := natstest.Start(t)
	return openJetStream(t, ns.URL())
}

func openJetStream(t *testing.T, url string) *topicstore.JetStreamStore {
	t.Helper()
	s, err := topicstore.OpenJetStream(t.Context(), topicstore.DefaultJetStreamConfig(url), testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
