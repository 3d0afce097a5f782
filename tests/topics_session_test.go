package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// TestTopicsSessionSubscription: client sessions subscribe, on three silo
// processes. A session (SDK) and `client subscribe PATTERN` (CLI) get
// every message an agent and a client on other silos publish, in order per
// publisher; a principal without Read is denied; the CLI's subscription is
// gone once it is interrupted, and the SDK session's once its silo is
// killed -9 (its lease ends) — from etcd itself.
func TestTopicsSessionSubscription(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: topicArgs})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sub := c.Client(t, 0)
	s, err := sub.Topics().SubscribeSession(ctx, "news.#")
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.Dial(ctx, []string{c.Silo(1).GatewayAddr}, client.WithPrincipal("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Topics().SubscribeSession(ctx, testcluster.Principal+":news.#"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("a principal without Read subscribes: %v, want PermissionDenied", err)
	}

	// The CLI subscribes through another silo and prints what it gets.
	bins, err := testcluster.Build()
	if err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(ctx, bins.Client, "--addr", c.Silo(1).GatewayAddr, "--as", testcluster.Principal, "subscribe", "news.#")
	stdout, err := cli.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cli.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	defer cli.Process.Kill()
	errLines := bufio.NewScanner(stderr)
	if !errLines.Scan() || !strings.HasPrefix(errLines.Text(), "subscribed Session:test:") {
		t.Fatalf("client subscribe said %q", errLines.Text())
	}
	go io.Copy(io.Discard, stderr)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	const n = 20
	if _, err := sub.Ask(ctx, "TopicSink:test:pub", &client.Message{Message: "publish news.agent from an agent"}); err != nil {
		t.Fatal(err)
	}
	pub := c.Client(t, 2)
	for i := range n {
		if _, err := pub.Topics().Publish(ctx, "news.world", &client.Message{Message: fmt.Sprint("m", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The SDK session.
	var got []string
	for len(got) < n+1 {
		select {
		case m := <-sub.Messages():
			if m.Subscription != s.ID {
				t.Fatalf("delivery %v", m)
			}
			got = append(got, m.Topic+" "+m.Message)
		case <-ctx.Done():
			t.Fatalf("the session got %d of %d: %v", len(got), n+1, got)
		}
	}
	checkOrder(t, "the session", got, n)
	// The CLI's: TOPIC FROM: TEXT.
	got = nil
	for len(got) < n+1 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("client subscribe ended; printed %v", got)
			}
			topic, rest, _ := strings.Cut(l, " ")
			_, text, _ := strings.Cut(rest, ": ")
			got = append(got, topic+" "+text)
		case <-ctx.Done():
			t.Fatalf("client subscribe printed %d of %d: %v", len(got), n+1, got)
		}
	}
	checkOrder(t, "client subscribe", got, n)

	etcd, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	sessionSubs := func() []string {
		r, err := etcd.Get(ctx, c.EtcdPrefix()+"topics/reg/sub/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range r.Kvs {
			if strings.Contains(string(kv.Key), ":session-") {
				out = append(out, string(kv.Key))
			}
		}
		return out
	}
	if l := sessionSubs(); len(l) != 2 {
		t.Fatalf("session subscriptions in etcd: %v, want 2", l)
	}
	// Interrupted, the CLI ends its session and its subscription.
	if err := cli.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cli.Wait(); err != nil {
		t.Fatalf("client subscribe after an interrupt: %v", err)
	}
	if l := sessionSubs(); len(l) != 1 || !strings.HasSuffix(l[0], s.ID) {
		t.Fatalf("session subscriptions after the CLI ended: %v, want %s's alone", l, s.ID)
	}
	// The SDK session's silo dies: its lease ends, and the subscription is
	// pruned by the silo that owns it in the view.
	c.Kill(0)
	testutil.WaitFor(t, "the dead silo's session subscription pruned", func() bool { return len(sessionSubs()) == 0 })
}

// checkOrder checks that got holds the agent's message and m0..m(n-1) in
// order.
func checkOrder(t *testing.T, who string, got []string, n int) {
	t.Helper()
	next, agent := 0, 0
	for _, g := range got {
		switch g {
		case "test:news.agent from an agent":
			agent++
		case fmt.Sprintf("test:news.world m%d", next):
			next++
		default:
			t.Fatalf("%s: unexpected or out of order %q after m%d: %v", who, g, next-1, got)
		}
	}
	if agent != 1 || next != n {
		t.Fatalf("%s: %v", who, got)
	}
}

// TestTopicsSessionSubscriptionSurvivesGateway: a session subscribed
// through silo A keeps its subscription when A is killed -9: the SDK
// re-attaches through another gateway under the same address (the session
// adopted there) and subscribes again, and every message published before
// and after the kill reaches it, in publish order.
func TestTopicsSessionSubscriptionSurvivesGateway(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: topicArgs})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sub := c.Client(t, 0, 1, 2)
	addr := sub.Address()
	victim := -1
	for i := range c.Len() {
		if strings.HasSuffix(addr, "@"+c.Silo(i).Name) {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("session %s names none of the silos", addr)
	}
	if _, err := sub.Topics().SubscribeSession(ctx, "alerts.#"); err != nil {
		t.Fatal(err)
	}
	pub := c.Client(t, (victim+1)%c.Len())
	const before, total = 5, 30
	publish := func(i int) {
		if _, err := pub.Topics().Publish(ctx, "alerts.disk", &client.Message{Message: fmt.Sprintf("a%d", i)}); err != nil {
			t.Fatalf("publish a%d: %v", i, err)
		}
	}
	next, dups := 0, 0
	receive := func(upTo int) {
		for next < upTo {
			select {
			case m := <-sub.Messages():
				if m.Topic == "" {
					continue
				}
				var n int
				if _, err := fmt.Sscanf(m.Message, "a%d", &n); err != nil {
					t.Fatalf("unexpected message %q", m.Message)
				}
				switch {
				case n == next:
					next++
				case n < next:
					dups++ // at least once: a redelivery of one already seen
				default:
					t.Fatalf("got a%d, want a%d next: a message was lost or overtaken", n, next)
				}
			case <-ctx.Done():
				t.Fatalf("received a0..a%d of %d", next-1, upTo)
			}
		}
	}
	for i := range before {
		publish(i)
	}
	receive(before)
	c.Kill(victim)
	for i := before; i < total; i++ {
		publish(i)
	}
	receive(total)
	if got := sub.Address(); got != addr {
		t.Fatalf("session address %s after the kill, want %s (kept)", got, addr)
	}
	t.Logf("a0..a%d received in order after kill -9 of the session's gateway silo, %d redelivered", total-1, dups)
}
