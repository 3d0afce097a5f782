// Package calls runs calls that outlast a silo against silo processes: a
// remote A2A task followed in the background whose following silo is
// killed -9 halfway (the result still reaches the caller once), and a
// working memory that outlives the kill -9 of its silo.
package calls

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/a2a/outside"
	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/tests/testcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testcluster.Main(m)) }

func TestBackgroundFollowSurvivesKill(t *testing.T) {
	out := outside.Start(true)
	defer out.Close()
	c := testcluster.Start(t, testcluster.Options{Silos: 2, A2A: true,
		Args: []string{"--a2a-allow-private-networks", "--min-reminder-period", "500ms"}})

	const remote = "A2A:test:slow"
	victim := c.Owner(remote)
	vi, si := 0, 1
	if c.Silo(1).Name == victim {
		vi, si = 1, 0
	}
	// A working memory on the same silo, to see it outlive the kill.
	mem := ""
	for i := 0; mem == ""; i++ {
		if a := "Memory:test:kept-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); c.Owner(a) == victim {
			mem = a
		}
	}

	// The caller: a client session on the silo that survives.
	var mu sync.Mutex
	var results []*client.Message
	cl, err := client.Dial(t.Context(), []string{c.Silo(si).GatewayAddr}, client.WithPrincipal(testcluster.Principal),
		client.WithOnMessage(func(m *client.Message) {
			if m.MessageType == a2a.TypeResult {
				mu.Lock()
				results = append(results, m)
				mu.Unlock()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	if _, err := client.NewMemory(cl, mem).Put(ctx, client.MemoryEntry{Key: "k", Text: "kept"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Agents().Create(ctx, remote, map[string]string{a2a.ConfigCardURL: out.CardURL()}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Ask(ctx, remote, &client.Message{Message: "slow survives", State: map[string]string{a2a.StateFollow: a2a.FollowBackground}})
	if err != nil || r.State[a2a.StateTaskID] == "" {
		t.Fatalf("background start: %v %v", r, err)
	}
	task := r.State[a2a.StateTaskID]
	testutil.WaitFor(t, "the outside task to start", func() bool { return out.Sends() == 1 })

	killed := time.Now()
	c.Kill(vi)
	c.WaitGone(victim)
	out.Release()

	testutil.WaitFor(t, "the result", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) > 0
	})
	t.Logf("the result reached the caller %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Once the follow is removed from the agent's state, its reminder is
	// removed too: nothing can deliver again.
	testutil.WaitFor(t, "the follow's reminder removed", func() bool {
		rs, err := cl.Agents().Reminders(ctx, remote)
		return err == nil && len(rs) == 0
	})
	mu.Lock()
	got := slices(results)
	mu.Unlock()
	if len(got) != 1 || got[0].Message != "done: survives" || got[0].State[a2a.StateTaskID] != task {
		t.Fatalf("results: %v", got)
	}
	// The result is in the working memory too.
	e, err := client.NewMemory(cl, "Memory:test:"+a2a.MemoryScope).Get(ctx, "slow/"+task)
	if err != nil || e.Text != "done: survives" || e.Category != "a2a.result" {
		t.Errorf("the result in the working memory: %+v %v", e, err)
	}
	// The memory that lived on the killed silo.
	if e, err := client.NewMemory(cl, mem).Get(ctx, "k"); err != nil || e.Text != "kept" {
		t.Errorf("%s after the kill: %+v %v", mem, e, err)
	}
}

func slices(ms []*client.Message) []*client.Message { return append([]*client.Message(nil), ms...) }
