package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
)

// sink records what subscribers get, across the silos of a test.
type sink struct {
	mu     sync.Mutex
	got    []*grain.Message
	healed bool
}

func (k *sink) register(t *testing.T, reg *grain.Registry) {
	t.Helper()
	err := reg.Register("Sink", func(h grain.Host) (grain.Agent, error) {
		return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
			switch {
			case m.Message == "subscribe":
				parts := strings.SplitN(m.State["args"], " ", 2)
				return nil, h.Subscribe(ctx, parts[0], parts[1], grain.WithMaxAttempts(2))
			case m.Message == "publish":
				_, err := h.Publish(ctx, m.State["topic"], &grain.Message{Message: "from an agent"})
				return nil, err
			case m.Topic == "":
				k.mu.Lock()
				k.got = append(k.got, m) // broadcasts
				k.mu.Unlock()
				return nil, nil
			}
			k.mu.Lock()
			k.got = append(k.got, m)
			healed := k.healed
			k.mu.Unlock()
			switch {
			case m.Message == "poison" && !healed:
				return nil, grain.Poison("cannot handle it")
			case m.Message == "flaky" && m.Attempt < 2:
				return nil, grain.Retry(time.Millisecond, "not yet")
			}
			return nil, nil
		}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (k *sink) wait(t *testing.T, what string, cond func([]*grain.Message) bool) []*grain.Message {
	t.Helper()
	var got []*grain.Message
	waitFor(t, what, func() bool {
		k.mu.Lock()
		got = append([]*grain.Message(nil), k.got...)
		k.mu.Unlock()
		return cond(got)
	})
	return got
}

// Topics across three silos: subscriptions from the SDK and from an agent,
// fan-out, competing consumers on different silos, order per publisher,
// retry then ack, poison to dead letter, replay and drop through the SDK,
// the trace context carried, and a cluster-wide broadcast.
func TestClusterTopics(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	k := &sink{}
	conf := func(cfg *SiloConfig, reg *grain.Registry) {
		k.register(t, reg)
		cfg.Topics.RetryMin, cfg.Topics.RetryMax = 5*time.Millisecond, 20*time.Millisecond
	}
	silos := []*Silo{c.startWith("s1", conf), c.startWith("s2", conf), c.startWith("s3", conf)}
	c.waitView("s1", "s2", "s3")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, []string{silos[0].GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Two members of "work", placed on different silos; "audit" from an
	// agent's own Host.Subscribe.
	var members []string
	for i := 0; len(members) < 2; i++ {
		a := fmt.Sprintf("Sink:acme:w%d", i)
		if o := Owner(a, []string{"s1", "s2", "s3"}); len(members) == 0 || o != Owner(members[0], []string{"s1", "s2", "s3"}) {
			members = append(members, a)
		}
	}
	for _, m := range members {
		if _, err := cl.Subscribe(ctx, m, "work", "orders.*", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Ask(ctx, "Sink:acme:auditor", &client.Message{Message: "subscribe", State: map[string]string{"args": "audit orders.#"}}); err != nil {
		t.Fatal(err)
	}
	subs, err := cl.Subscriptions(ctx, "")
	if err != nil || len(subs) != 2 || subs[0].Id != "acme:audit" || subs[0].MaxAttempts != 2 || len(subs[1].Members) != 2 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	const n = 30
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i := range n {
		if _, err := cl.Publish(ctx, "orders.created", &client.Message{Message: fmt.Sprint(i), Traceparent: tp}); err != nil {
			t.Fatal(err)
		}
	}
	for _, text := range []string{"flaky", "poison"} {
		if _, err := cl.Publish(ctx, "acme:orders.new", &client.Message{Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Ask(ctx, "Sink:acme:pub", &client.Message{Message: "publish", State: map[string]string{"topic": "orders.x.y"}}); err != nil {
		t.Fatal(err)
	}
	got := k.wait(t, "deliveries", func(got []*grain.Message) bool {
		dead, _, _ := cl.DeadLetters(ctx, "audit", "", 10)
		return len(got) >= 2*n+2+2+2+1 && len(dead) == 1
	})
	bySub := map[string][]string{}
	to := map[string]bool{}
	for _, m := range got {
		bySub[m.Subscription] = append(bySub[m.Subscription], m.Message)
		if m.Subscription == "acme:work" {
			to[m.To] = true
		}
		if m.Message == "0" && !strings.Contains(m.Traceparent, "4bf92f3577b34da6a3ce929d0e0e4736") {
			t.Errorf("the trace did not travel: %q", m.Traceparent)
		}
	}
	for _, sub := range []string{"acme:work", "acme:audit"} {
		for i := range n {
			if bySub[sub][i] != fmt.Sprint(i) {
				t.Fatalf("%s: got %v, out of order", sub, bySub[sub][:n])
			}
		}
	}
	if len(to) != 2 {
		t.Errorf("competing consumers: only %v", to)
	}
	if !strings.Contains(strings.Join(bySub["acme:audit"], ","), "from an agent") {
		t.Errorf("the agent's publish to orders.x.y did not reach audit: %v", bySub["acme:audit"])
	}
	dead, more, err := cl.DeadLetters(ctx, "acme:audit", "", 10)
	if err != nil || more || len(dead) != 1 || dead[0].Reason != "poison: cannot handle it" || dead[0].Message.Message != "poison" {
		t.Fatalf("dead letters: %v %v %v", dead, more, err)
	}
	k.mu.Lock()
	k.healed = true
	before := len(k.got)
	k.mu.Unlock()
	if nr, err := cl.ReplayDeadLetters(ctx, "audit", dead[0].Id); err != nil || nr != 1 {
		t.Fatalf("replay: %d %v", nr, err)
	}
	k.wait(t, "the replay", func(got []*grain.Message) bool { return len(got) > before })
	if nd, err := cl.DropDeadLetters(ctx, "audit"); err != nil || nd != 0 {
		t.Fatalf("drop all of none: %d %v", nd, err)
	}
	// A broadcast reaches the active sinks of every silo.
	var active []string
	for _, s := range silos {
		for _, a := range s.Runtime().Activations("Sink") {
			active = append(active, a.Address.String())
		}
	}
	sort.Strings(active)
	k.mu.Lock()
	k.got = nil
	k.mu.Unlock()
	reached, err := cl.Broadcast(ctx, "Sink:acme:*", &client.Message{Message: "hello all"})
	if err != nil || reached != len(active) {
		t.Fatalf("broadcast reached %d, %v; active %v", reached, err, active)
	}
	k.wait(t, "the broadcast", func(got []*grain.Message) bool { return len(got) == len(active) })
	for _, m := range members {
		if _, err := cl.Unsubscribe(ctx, m, "work"); err != nil {
			t.Fatal(err)
		}
	}
}
