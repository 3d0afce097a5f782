package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/natstest"
)

// Two silos keep their topics in NATS JetStream (--topic-store): a
// subscription's members compete across silos, a publisher's messages
// arrive in order, a poison message is a dead letter, and etcd holds no
// topic key.
func TestClusterTopicsOnJetStream(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	ns := natstest.Start(t)
	defer ns.Kill()
	c := newTestCluster(t)
	defer c.close()
	k := &sink{}
	conf := func(cfg *SiloConfig, reg *grain.Registry) {
		k.register(t, reg)
		cfg.TopicStore = ns.URL()
		cfg.TopicNATS.Bucket = "cluster_test"
		cfg.Topics.RetryMin, cfg.Topics.RetryMax = 5*time.Millisecond, 20*time.Millisecond
	}
	silos := []*Silo{c.startWith("s1", conf), c.startWith("s2", conf)}
	c.waitView("s1", "s2")
	ctx, cancel := context.WithTimeout(t.Context(), 2*waitTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, []string{silos[1].GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var members []string
	for i := 0; len(members) < 2; i++ {
		a := fmt.Sprintf("Sink:acme:w%d", i)
		if len(members) == 0 || Owner(a, []string{"s1", "s2"}) != Owner(members[0], []string{"s1", "s2"}) {
			members = append(members, a)
		}
	}
	for _, m := range members {
		if _, err := cl.Topics().Subscribe(ctx, m, "work", "orders.*"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Topics().Subscribe(ctx, "Sink:acme:auditor", "audit", "orders.#", client.MaxAttempts(2)); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		if _, err := cl.Topics().Publish(ctx, "orders.created", &client.Message{Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Topics().Publish(ctx, "orders.x.poison", &client.Message{Message: "poison"}); err != nil {
		t.Fatal(err)
	}
	got := k.wait(t, "deliveries", func(got []*grain.Message) bool {
		dead, _ := cl.Topics().DeadLetters(ctx, "audit", client.Limit(10))
		return len(got) >= 2*n+1 && len(dead.Items) == 1
	})
	bySub, to := map[string][]string{}, map[string]bool{}
	for _, m := range got {
		bySub[m.Subscription] = append(bySub[m.Subscription], m.Message)
		if m.Subscription == "acme:work" {
			to[m.To] = true
		}
	}
	for _, sub := range []string{"acme:work", "acme:audit"} {
		for i := range n {
			if bySub[sub][i] != fmt.Sprint(i) {
				t.Fatalf("%s: got %v, out of order", sub, bySub[sub])
			}
		}
	}
	if len(to) != 2 {
		t.Errorf("competing consumers: only %v", to)
	}
	page, err := cl.Topics().DeadLetters(ctx, "audit", client.Limit(10))
	dead := page.Items
	if err != nil || len(dead) != 1 || dead[0].Reason != "poison: cannot handle it" {
		t.Fatalf("dead letters: %v %v", dead, err)
	}
	r, err := silos[0].etcd.Client().Get(ctx, silos[0].etcd.Prefix()+"topics/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 0 {
		t.Fatalf("etcd holds %d topic keys (%v)", r.Count, err)
	}
}

// A --topic-store that is neither etcd nor a NATS URL, or a NATS server
// that does not answer, stops the silo's start with the reason.
func TestTopicStoreRefused(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	for _, tc := range []struct{ store, want string }{
		{"postgres://u:secret@h/db", "use etcd, or nats://HOST:PORT"},
		{"nats://u:secret@127.0.0.1:1", "connect to NATS"},
	} {
		cfg := DefaultSiloConfig()
		cfg.Name = "bad"
		cfg.GatewayAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
		cfg.Etcd.Endpoints, cfg.Etcd.Prefix = []string{c.etcd.Endpoint()}, "/bad"
		cfg.Logger = testLogger()
		cfg.TopicStore = tc.store
		s, err := NewSilo(cfg, grain.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		err = s.Start(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("--topic-store %s: %v", tc.store, err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		s.Close(cctx)
		cancel()
	}
}
