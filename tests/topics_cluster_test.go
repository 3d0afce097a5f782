package tests

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

// The topic tests, on three silo processes. Subscribers are
// TopicSink agents (package internal/demoagents), which write a line per delivery to a
// file the test reads.

// topicArgs make retries quick.
var topicArgs = []string{"--topic-retry-min", "20ms", "--topic-retry-max", "500ms", "--topic-session-grace", "1s"}

// sinkOn returns a TopicSink address owned by silo (among the live ones),
// or, if silo is "", one owned by another silo than avoid.
func sinkOn(c *testcluster.Cluster, prefix, silo, avoid string) string {
	for i := 0; ; i++ {
		a := fmt.Sprintf("%s:%s:%s%d", demoagents.TopicSinkType, testcluster.Principal, prefix, i)
		o := c.Owner(a)
		if (silo != "" && o == silo) || (silo == "" && o != avoid) {
			return a
		}
	}
}

// waitSink waits until done holds for the lines the TopicSink agents
// wrote, and returns them; done also says what it is waiting for.
func waitSink(t *testing.T, c *testcluster.Cluster, what string, done func(lines []demoagents.SinkLine) (bool, string)) []demoagents.SinkLine {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		lines, err := c.ReadTopicSink()
		if err != nil {
			t.Fatal(err)
		}
		ok, state := done(lines)
		if ok {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond) // the sink is a file: poll it
	}
}

// topicCLI runs the client program against gateway addr and returns its
// stdout.
func topicCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	bins, err := testcluster.Build()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bins.Client, append([]string{"--addr", addr, "--as", testcluster.Principal}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client %v: %v\n%s%s", args, err, out, stderr.String())
	}
	return string(out)
}

// TestTopicsCluster: wildcard subscriptions from the SDK and from an
// agent, competing consumers on two silos, each subscription its copy, a
// publisher's order kept, retry then ack, poison to a dead letter, replay
// and drop with the CLI, the trace context carried.
func TestTopicsCluster(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: topicArgs})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl := c.Client(t)
	names := c.Names()
	w0 := sinkOn(c, "w", names[0], "")
	w1 := sinkOn(c, "w", names[1], "")
	for _, w := range []string{w0, w1} {
		if _, err := cl.Topics().Subscribe(ctx, w, "jobs", "jobs.#", client.MaxAttempts(3)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Ask(ctx, "TopicSink:test:auditor", &client.Message{Message: "subscribe audit jobs.*"}); err != nil {
		t.Fatal(err)
	}
	out := topicCLI(t, c.Silo(2).GatewayAddr, "subscriptions")
	if !strings.Contains(out, "test:audit") || !strings.Contains(out, "test:jobs") || !strings.Contains(out, w0) {
		t.Fatalf("subscriptions:\n%s", out)
	}
	// Three publishers, one per gateway, 20 messages each.
	const per = 20
	var wg sync.WaitGroup
	ids := make([][]string, 3)
	for p := range 3 {
		pc := c.Client(t, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				r, err := pc.Topics().Publish(ctx, "jobs.new", &client.Message{Message: fmt.Sprintf("p%d-%d", p, j)})
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				ids[p] = append(ids[p], r.ID)
			}
		}()
	}
	wg.Wait()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	special := map[string]string{}
	for _, text := range []string{"flaky:2", "retry:3", "poison"} {
		r, err := cl.Topics().Publish(grain.WithTraceparent(ctx, tp), "test:jobs.new", &client.Message{Message: text})
		if err != nil || r.Subscriptions != 2 {
			t.Fatalf("publish %s: %v, %v", text, r, err)
		}
		special[text] = r.ID
	}
	if _, err := cl.Ask(ctx, "TopicSink:test:pub", &client.Message{Message: "publish jobs.deep.x from an agent"}); err != nil {
		t.Fatal(err)
	}
	cliOut := topicCLI(t, c.Silo(1).GatewayAddr, "publish", "jobs.cli", "from", "the", "cli")
	if !strings.Contains(cliOut, "(queued for 2 subscriptions)") {
		t.Fatalf("client publish: %q", cliOut)
	}
	want := map[string]int{"test:jobs": 3*per + 2 + 2, "test:audit": 3*per + 2 + 1}
	lines := waitSink(t, c, "acknowledgments", func(lines []demoagents.SinkLine) (bool, string) {
		acks := map[string]map[string]bool{}
		for _, l := range lines {
			if l.Outcome == "ack" {
				if acks[l.Subscription] == nil {
					acks[l.Subscription] = map[string]bool{}
				}
				acks[l.Subscription][l.ID] = true
			}
		}
		return len(acks["test:jobs"]) == want["test:jobs"] && len(acks["test:audit"]) == want["test:audit"],
			fmt.Sprintf("acked %d of %d jobs, %d of %d audit", len(acks["test:jobs"]), want["test:jobs"], len(acks["test:audit"]), want["test:audit"])
	})
	agents := map[string]int{}
	attempts := map[string][]string{}
	last := map[string]int{}
	for _, l := range lines {
		if l.Subscription == "test:jobs" {
			agents[l.Agent]++
		}
		if l.Text == "flaky:2" || l.Text == "retry:3" || l.Text == "poison" {
			attempts[l.Subscription+" "+l.Text] = append(attempts[l.Subscription+" "+l.Text], fmt.Sprintf("%d:%s", l.Attempt, l.Outcome))
			if l.Traceparent != tp {
				t.Errorf("%s arrived with traceparent %q, want %q", l.Text, l.Traceparent, tp)
			}
		}
		var p, j int
		if n, _ := fmt.Sscanf(l.Text, "p%d-%d", &p, &j); n == 2 {
			k := l.Subscription + " " + l.From
			if prev, ok := last[k]; ok && j != prev+1 {
				t.Errorf("%s: message %d after %d", k, j, prev)
			}
			last[k] = j
		}
	}
	if agents[w0] == 0 || agents[w1] == 0 {
		t.Errorf("competing consumers: %v", agents)
	}
	for _, sub := range []string{"test:jobs", "test:audit"} {
		if got := fmt.Sprint(attempts[sub+" flaky:2"]); got != "[1:error 2:ack]" {
			t.Errorf("%s flaky:2: %s", sub, got)
		}
		if got := fmt.Sprint(attempts[sub+" retry:3"]); got != "[1:retry 2:retry 3:ack]" {
			t.Errorf("%s retry:3: %s", sub, got)
		}
		if got := fmt.Sprint(attempts[sub+" poison"]); got != "[1:poison]" {
			t.Errorf("%s poison: %s", sub, got)
		}
	}
	// The poison message is a dead letter of each subscription; replay it
	// with the CLI (it is poison again), then drop it.
	gw := c.Silo(0).GatewayAddr
	waitDead := func(sub string) string {
		var out string
		waitSink(t, c, "a dead letter of "+sub, func([]demoagents.SinkLine) (bool, string) {
			out = topicCLI(t, gw, "deadletters", sub)
			return strings.Contains(out, "poison: the sink refuses it"), out
		})
		return out
	}
	out = waitDead("jobs")
	if !strings.Contains(out, "test:jobs.new") || !strings.Contains(out, "poison") {
		t.Fatalf("deadletters jobs:\n%s", out)
	}
	waitDead("test:audit")
	if out := topicCLI(t, gw, "deadletters", "replay", "jobs", "--all"); out != "replayed 1 dead letters of jobs\n" {
		t.Fatalf("replay: %q", out)
	}
	waitSink(t, c, "the replayed delivery", func(lines []demoagents.SinkLine) (bool, string) {
		n := 0
		for _, l := range lines {
			if l.Subscription == "test:jobs" && l.ID == special["poison"] {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d deliveries of the poison message", n)
	})
	waitDead("jobs")
	if out := topicCLI(t, gw, "deadletters", "drop", "jobs", "--all"); out != "dropped 1 dead letters of jobs\n" {
		t.Fatalf("drop: %q", out)
	}
	if out := topicCLI(t, gw, "deadletters", "jobs"); out != "none\n" {
		t.Fatalf("dead letters after the drop: %q", out)
	}
}

// TestTopicsKill9: steady publishing with idempotency keys while the silo
// that delivers the subscription (and hosts one of its agents) is killed
// -9 and restarted, then the publisher's gateway silo likewise. Every
// published id is acknowledged or dead-lettered; duplicates are counted and
// reported.
func TestTopicsKill9(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Silos: 3, Args: topicArgs})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	names := c.Names()
	del := c.Owner("topics/test:steady") // the silo that delivers the subscription
	sIdx := slices.Index(names, del)
	pIdx := (sIdx + 1) % len(names) // the publisher's gateway
	m0 := sinkOn(c, "m", del, "")
	m1 := sinkOn(c, "m", "", del)
	cl := c.Client(t)
	for _, m := range []string{m0, m1} {
		if _, err := cl.Topics().Subscribe(ctx, m, "steady", "steady.#"); err != nil {
			t.Fatal(err)
		}
	}
	order := []int{pIdx}
	for i := range names {
		if i != pIdx {
			order = append(order, i)
		}
	}
	pub := c.Client(t, order...)
	const n = 900
	ids := make([]string, n)
	at := map[int]chan struct{}{300: make(chan struct{}), 600: make(chan struct{})}
	resume := make(chan struct{})
	done := make(chan struct{})
	var retries int
	go func() {
		defer close(done)
		for i := range n {
			if ch := at[i]; ch != nil {
				close(ch)
				if i == 600 {
					select { // the first kill's restart is over
					case <-resume:
					case <-ctx.Done():
						return
					}
				}
			}
			m := &client.Message{Message: strconv.Itoa(i), IdempotencyKey: "k" + strconv.Itoa(i)}
			for {
				r, err := pub.Topics().Publish(ctx, "steady.ticks", m)
				if err == nil {
					ids[i] = r.ID
					break
				}
				if ctx.Err() != nil {
					t.Errorf("publish %d: %v", i, err)
					return
				}
				retries++
				time.Sleep(20 * time.Millisecond) // a publisher's own pause between tries
			}
			time.Sleep(2 * time.Millisecond) // steady, not flat out
		}
	}()
	<-at[300]
	t.Logf("killing %s (delivers the subscription, hosts %s)", del, m0)
	c.Kill(sIdx)
	c.WaitGone(del)
	c.Restart(sIdx)
	c.WaitMembers(3)
	close(resume)
	<-at[600]
	t.Logf("killing %s (the publisher's gateway)", names[pIdx])
	c.Kill(pIdx)
	c.WaitGone(names[pIdx])
	c.Restart(pIdx)
	c.WaitMembers(3)
	<-done
	if t.Failed() {
		return
	}
	published := map[string]int{}
	for i, id := range ids {
		published[id] = i
	}
	var dead map[string]bool
	lines := waitSink(t, c, "every id acknowledged or dead-lettered", func(lines []demoagents.SinkLine) (bool, string) {
		acked := map[string]bool{}
		for _, l := range lines {
			if l.Subscription == "test:steady" && l.Outcome == "ack" {
				acked[l.ID] = true
			}
		}
		dead = map[string]bool{}
		page, err := cl.Topics().DeadLetters(ctx, "steady", client.Limit(1000))
		if err != nil {
			return false, err.Error()
		}
		for _, d := range page.Items {
			dead[d.Message.ID] = true
		}
		var missing []int
		for id, i := range published {
			if !acked[id] && !dead[id] {
				missing = append(missing, i)
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, fmt.Sprintf("%d not acknowledged: %v", len(missing), missing[:min(len(missing), 20)])
	})
	acks := map[string]int{}
	var firsts []int
	for _, l := range lines {
		if l.Subscription != "test:steady" || l.Outcome != "ack" {
			continue
		}
		if _, ok := published[l.ID]; !ok {
			t.Errorf("delivered %s (%q), which was never published", l.ID, l.Text)
		}
		if acks[l.ID]++; acks[l.ID] == 1 {
			firsts = append(firsts, published[l.ID])
		}
	}
	dups, outOfOrder := 0, 0
	for _, k := range acks {
		dups += k - 1
	}
	for i := 1; i < len(firsts); i++ {
		if firsts[i] < firsts[i-1] {
			outOfOrder++
		}
	}
	t.Logf("published %d (%d publish retries), acknowledged %d, dead-lettered %d, lost 0; duplicates %d; first deliveries out of publish order %d", n, retries, len(acks), len(dead), dups, outOfOrder)
	if outOfOrder > 0 {
		t.Errorf("%d first deliveries out of publish order", outOfOrder)
	}
}
