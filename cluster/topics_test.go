package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
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
	// A budget for the whole test's calls (each wait has its own): on a
	// loaded machine its ~40 calls through three silos take a while.
	ctx, cancel := context.WithTimeout(t.Context(), 3*waitTimeout)
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
		if _, err := cl.Topics().Subscribe(ctx, m, "work", "orders.*"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Ask(ctx, "Sink:acme:auditor", &client.Message{Message: "subscribe", State: map[string]string{"args": "audit orders.#"}}); err != nil {
		t.Fatal(err)
	}
	subs, err := cl.Topics().Subscriptions(ctx, "")
	if err != nil || len(subs) != 2 || subs[0].ID != "acme:audit" || subs[0].MaxAttempts != 2 || len(subs[1].Members) != 2 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	const n = 30
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i := range n {
		if _, err := cl.Topics().Publish(grain.WithTraceparent(ctx, tp), "orders.created", &client.Message{Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, text := range []string{"flaky", "poison"} {
		if _, err := cl.Topics().Publish(ctx, "acme:orders.new", &client.Message{Message: text}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Ask(ctx, "Sink:acme:pub", &client.Message{Message: "publish", State: map[string]string{"topic": "orders.x.y"}}); err != nil {
		t.Fatal(err)
	}
	got := k.wait(t, "deliveries", func(got []*grain.Message) bool {
		dead, _ := cl.Topics().DeadLetters(ctx, "audit", client.Limit(10))
		return len(got) >= 2*n+2+2+2+1 && len(dead.Items) == 1
	})
	bySub := map[string][]string{}
	fromAgent := map[string]bool{}
	to := map[string]bool{}
	for _, m := range got {
		if m.From == "Sink:acme:pub" {
			// Another publisher's: in parallel with the client's, in
			// no order with them (order is per publisher).
			fromAgent[m.Subscription] = true
			continue
		}
		bySub[m.Subscription] = append(bySub[m.Subscription], m.Message)
		if m.Subscription == "acme:work" {
			to[m.To] = true
		}
		if m.Message == "0" && !strings.Contains(m.Traceparent(), "4bf92f3577b34da6a3ce929d0e0e4736") {
			t.Errorf("the trace did not travel: %q", m.Traceparent())
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
	if !fromAgent["acme:audit"] {
		t.Errorf("the agent's publish to orders.x.y did not reach audit: %v", bySub["acme:audit"])
	}
	page, err := cl.Topics().DeadLetters(ctx, "acme:audit", client.Limit(10))
	dead, more := page.Items, page.Next != ""
	if err != nil || more || len(dead) != 1 || dead[0].Reason != "poison: cannot handle it" || dead[0].Message.Message != "poison" {
		t.Fatalf("dead letters: %v %v %v", dead, more, err)
	}
	k.mu.Lock()
	k.healed = true
	before := len(k.got)
	k.mu.Unlock()
	if nr, err := cl.Topics().ReplayDeadLetters(ctx, "audit", dead[0].ID); err != nil || nr != 1 {
		t.Fatalf("replay: %d %v", nr, err)
	}
	k.wait(t, "the replay", func(got []*grain.Message) bool { return len(got) > before })
	if nd, err := cl.Topics().DropDeadLetters(ctx, "audit"); err != nil || nd != 0 {
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
	reached, err := cl.Topics().Broadcast(ctx, "Sink:acme:*", &client.Message{Message: "hello all"})
	if err != nil || reached != len(active) {
		t.Fatalf("broadcast reached %d, %v; active %v", reached, err, active)
	}
	k.wait(t, "the broadcast", func(got []*grain.Message) bool { return len(got) == len(active) })
	for _, m := range members {
		if _, err := cl.Topics().Unsubscribe(ctx, m, "work"); err != nil {
			t.Fatal(err)
		}
	}
}

// The Topics service's ACL checks: Message on a topic to publish to it,
// Read to subscribe to it, Configure on another's agent, Read and
// Configure on another's subscription.
func TestClusterTopicsACL(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	k := &sink{}
	aclFile := t.TempDir() + "/acl.json"
	doc := `{"Rules": [
		{"OwnerPattern": "acme", "AgentPattern": "orders*", "CallerPattern": "bob", "Permission": "Message"},
		{"OwnerPattern": "acme", "AgentPattern": "news*", "CallerPattern": "bob", "Permission": "Read"},
		{"OwnerPattern": "acme", "AgentPattern": "audit", "CallerPattern": "bob", "Permission": "Read"}
	]}`
	if err := os.WriteFile(aclFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.startWith("s1", func(cfg *SiloConfig, reg *grain.Registry) {
		k.register(t, reg)
		cfg.ACLFile = aclFile
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	dial := func(who string) *client.Client {
		cl, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal(who))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	acme, bob := dial("acme"), dial("bob")
	defer acme.Close()
	defer bob.Close()
	if _, err := acme.Topics().Subscribe(ctx, "Sink:acme:a", "audit", "orders.#"); err != nil {
		t.Fatal(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("%s: %v, want PermissionDenied", what, err)
		}
	}
	if _, err := bob.Topics().Publish(ctx, "acme:orders.created", &client.Message{Message: "from bob"}); err != nil {
		t.Errorf("bob publishes to acme:orders.created (Message on orders*): %v", err)
	}
	_, err := bob.Topics().Publish(ctx, "acme:secret.x", &client.Message{})
	denied("bob publishes to acme:secret.x", err)
	_, err = bob.Topics().Subscribe(ctx, "Sink:bob:b", "mine", "acme:orders.#")
	denied("bob subscribes to acme:orders.# with Message only", err)
	if _, err := bob.Topics().Subscribe(ctx, "Sink:bob:b", "mine", "acme:news.*"); err != nil {
		t.Errorf("bob subscribes to acme:news.* (Read on news*): %v", err)
	}
	_, err = bob.Topics().Subscribe(ctx, "Sink:acme:x", "theirs", "bob:x")
	denied("bob subscribes acme's agent", err)
	if _, err := bob.Topics().DeadLetters(ctx, "acme:audit", client.Limit(10)); err != nil {
		t.Errorf("bob reads acme:audit's dead letters (Read on audit): %v", err)
	}
	_, err = bob.Topics().DropDeadLetters(ctx, "acme:audit")
	denied("bob drops acme:audit's dead letters", err)
	_, err = bob.Topics().Broadcast(ctx, "Sink:*:*", &client.Message{})
	denied("bob broadcasts to every owner", err)
	k.wait(t, "bob's publish delivered", func(got []*grain.Message) bool { return len(got) == 1 && got[0].Message == "from bob" })
}

// A client session subscribes for as long as it lives: an agent and
// clients on other silos publish, and the session gets every message, in
// order per publisher; a principal without Read on the topics is denied;
// the session's Close removes the subscription from etcd.
func TestClusterSessionSubscription(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	k := &sink{}
	aclFile := t.TempDir() + "/acl.json"
	doc := `{"Rules": [
		{"OwnerPattern": "acme", "AgentPattern": "orders*", "CallerPattern": "bob", "Permission": "Message"}
	]}`
	if err := os.WriteFile(aclFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(cfg *SiloConfig, reg *grain.Registry) {
		k.register(t, reg)
		cfg.ACLFile = aclFile
	}
	silos := []*Silo{c.startWith("s1", conf), c.startWith("s2", conf)}
	c.waitView("s1", "s2")
	ctx, cancel := context.WithTimeout(t.Context(), 3*waitTimeout) // for all its calls
	defer cancel()
	dial := func(s *Silo, who string) *client.Client {
		cl, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal(who))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	sub := dial(silos[0], "acme")
	acme, bob := dial(silos[1], "acme"), dial(silos[1], "bob")
	defer acme.Close()
	defer bob.Close()
	defer sub.Close()
	s, err := sub.Topics().SubscribeSession(ctx, "orders.#")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.ID, "acme:session-") || s.Pattern != "acme:orders.#" {
		t.Fatalf("subscription %v", s)
	}
	// Listed at once, through any silo (Subscriptions reads etcd).
	subs, err := acme.Topics().Subscriptions(ctx, "")
	if err != nil || len(subs) != 1 || subs[0].ID != s.ID || len(subs[0].Members) != 1 || subs[0].Members[0] != sub.Address() {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	if _, err := bob.Topics().SubscribeSession(ctx, "acme:orders.#"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("bob, with Message only, subscribes his session to acme:orders.#: %v, want PermissionDenied", err)
	}
	if _, err := bob.Topics().Subscribe(ctx, sub.Address(), "x", "bob:x"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("bob subscribes acme's session: %v, want PermissionDenied", err)
	}
	const n = 20
	for i := range n {
		if _, err := acme.Topics().Publish(ctx, "orders.created", &client.Message{Message: fmt.Sprint("acme ", i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Topics().Publish(ctx, "acme:orders.new", &client.Message{Message: fmt.Sprint("bob ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acme.Ask(ctx, "Sink:acme:pub", &client.Message{Message: "publish", State: map[string]string{"topic": "orders.x.y"}}); err != nil {
		t.Fatal(err)
	}
	byFrom := map[string][]string{}
	for got := 0; got < 2*n+1; got++ {
		select {
		case m := <-sub.Messages():
			if m.Subscription != s.ID || !strings.HasPrefix(m.Topic, "acme:orders.") {
				t.Fatalf("delivery %v", m)
			}
			who, _, _ := strings.Cut(m.Message, " ")
			byFrom[who] = append(byFrom[who], m.Message)
		case <-ctx.Done():
			t.Fatalf("got %d of %d deliveries: %v", got, 2*n+1, byFrom)
		}
	}
	for _, who := range []string{"acme", "bob"} {
		for i := range n {
			if byFrom[who][i] != fmt.Sprint(who, " ", i) {
				t.Fatalf("%s's messages out of order: %v", who, byFrom[who])
			}
		}
	}
	if len(byFrom["from"]) != 1 {
		t.Fatalf("the agent's publish: %v", byFrom)
	}
	// The session ends: so does its subscription, in etcd.
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	cli, prefix := silos[1].etcd.Client(), silos[1].etcd.Prefix()+"topics/"
	waitFor(t, "the subscription gone from etcd", func() bool {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false
		}
		for _, kv := range r.Kvs {
			if strings.Contains(string(kv.Key), s.ID) {
				return false
			}
		}
		return true
	})
	if subs, err := acme.Topics().Subscriptions(ctx, ""); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions after the session closed: %v, %v", subs, err)
	}
}

// Under steady topic load, etcd's database in use grows by every round
// while nothing compacts, and stays flat once compaction runs (a step of
// the silo's compactor, Store.CompactOnce, per round, as one interval of
// the compactor does): over four rounds it grows by less than one round
// grew without. A size bound, not a time one.
func TestClusterTopicsEtcdSizeFlat(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	var acked atomic.Int64
	s := c.startWith("s1", func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.Etcd.CompactInterval = 0 // the test compacts, one interval's step per round
		err := reg.Register("Acker", func(grain.Host) (grain.Agent, error) {
			return agentFunc(func(context.Context, *grain.Message) (*grain.Message, error) {
				acked.Add(1)
				return nil, nil
			}), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Topics().Subscribe(ctx, "Acker:acme:a", "steady", "load.#"); err != nil {
		t.Fatal(err)
	}
	cli := s.etcd.Client()
	queue := s.etcd.Prefix() + "topics/q/"
	const perRound = 200
	payload := strings.Repeat("x", 256)
	round := func() int64 {
		t.Helper()
		// Each round has its own bound: the rounds' sum is long on a
		// loaded machine.
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		want := acked.Load() + perRound
		var wg sync.WaitGroup
		for p := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p; i < perRound; i += 6 {
					if _, err := cl.Topics().Publish(ctx, "load.x", &client.Message{Message: payload}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		waitFor(t, "every message acknowledged and removed", func() bool {
			if acked.Load() < want {
				return false
			}
			r, err := cli.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && r.Count == 0
		})
		// The log's records go with an acknowledgement's sweep, at most one
		// a second per owner: a message more, acknowledged, at each poll
		// brings the sweep that takes the round's records.
		waitFor(t, "the round's log records swept", func() bool {
			if _, err := cl.Topics().Publish(ctx, "load.tick", &client.Message{Message: "tick"}); err != nil {
				return false
			}
			r, err := cli.Get(ctx, s.etcd.Prefix()+"topics/log/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && r.Count < 16
		})
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.DbSizeInUse
	}
	var noted int64 // the revision the compactor noted an interval before
	compact := func() {
		t.Helper()
		rev, err := s.etcd.CompactOnce(t.Context(), noted)
		if err != nil {
			t.Fatal(err)
		}
		noted = rev
	}
	// Without compaction.
	u1 := round()
	round()
	u3 := round()
	grew := (u3 - u1) / 2
	if grew <= 0 {
		t.Fatalf("etcd in use did not grow without compaction: %d, %d", u1, u3)
	}
	// With: each round ends with an interval of the compactor (the first
	// notes a revision; the next compact up to the one noted before).
	compact()
	for range 2 {
		round()
		compact()
	}
	warm := round()
	compact()
	var last int64
	for range 4 {
		last = round()
		compact()
	}
	t.Logf("etcd in use: %d, %d, %d without compaction; %d then %d four rounds later with", u1, u1+grew, u3, warm, last)
	if last-warm >= grew {
		t.Fatalf("etcd in use grew by %d over four compacted rounds, more than one round grew without (%d)", last-warm, grew)
	}
}

// A session that goes away without closing (its stream just ends) keeps
// its subscription while the gateway keeps the session for re-attaching;
// once the gateway forgets it (its backlog age), the subscription goes.
func TestClusterSessionSubscriptionExpires(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	s := c.startWith("s1", func(cfg *SiloConfig, _ *grain.Registry) {
		cfg.Gateway.SessionBacklogAge = 300 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	conn, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mctx := metadata.AppendToOutgoingContext(ctx, protocol.PrincipalHeader, "acme")
	sctx, endStream := context.WithCancel(mctx)
	stream, err := agentsilov1.NewGatewayClient(conn).Session(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentsilov1.ClientFrame{Frame: &agentsilov1.ClientFrame_Hello{Hello: &agentsilov1.Hello{Principal: "acme"}}}); err != nil {
		t.Fatal(err)
	}
	f, err := stream.Recv()
	if err != nil || f.GetWelcome() == nil {
		t.Fatalf("welcome: %v %v", f, err)
	}
	addr := f.GetWelcome().GetAddress()
	r, err := agentsilov1.NewTopicsClient(conn).Subscribe(mctx, &agentsilov1.SubscribeRequest{Agent: addr, Pattern: "orders.#"})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetSubscription().GetId()
	lister, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer lister.Close()
	listed := func() bool {
		subs, err := lister.Topics().Subscriptions(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			if sub.ID == id {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatalf("%s not listed", id)
	}
	endStream() // detached, not closed
	waitFor(t, "the forgotten session's subscription removed", func() bool { return !listed() })
}

// The SDK subscribes its session again after a re-attach: its gateway's
// silo stops, the session re-attaches through the other (adopted there, so
// under the same address), and what is published then reaches it.
func TestClusterSessionSubscriptionFailover(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	s1, s2 := c.start("s1"), c.start("s2")
	c.waitView("s1", "s2")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	sub, err := client.Dial(ctx, []string{s1.GatewayAddr(), s2.GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := client.Dial(ctx, []string{s2.GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if _, err := sub.Topics().SubscribeSession(ctx, "orders.#"); err != nil {
		t.Fatal(err)
	}
	before := sub.Address()
	c.stop("s1")
	// Publish until one arrives: the subscription is made again once the
	// session has re-attached through s2, and what is published from then
	// on reaches it.
	n := 0
	waitFor(t, "a message published after the failover delivered", func() bool {
		n++
		text := fmt.Sprintf("after the failover %d", n)
		if _, err := pub.Topics().Publish(ctx, "orders.created", &client.Message{Message: text}); err != nil {
			return false
		}
		for {
			select {
			case m := <-sub.Messages():
				if strings.HasPrefix(m.Message, "after the failover") {
					return true
				}
			default:
				return false
			}
		}
	})
	if got := sub.Address(); got != before {
		t.Fatalf("session address after the failover %s, want %s (kept)", got, before)
	}
}
