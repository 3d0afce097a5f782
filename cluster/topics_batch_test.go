package cluster

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/client"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/natstest"
)

// batcher takes topic deliveries in batches (grain.BatchHandler): it
// holds its first delivery until released, asks for "retry" again once,
// and records what it handled and the size of each batch.
type batcher struct {
	release chan struct{}
	mu      sync.Mutex
	handled []string
	sizes   []int
	attempt map[string]uint32
}

func (b *batcher) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic == "" {
		return m.Response(), nil
	}
	n, err := b.OnMessages(ctx, []*grain.Message{m})
	if n == 1 {
		return nil, nil
	}
	return nil, err
}

func (b *batcher) OnMessages(ctx context.Context, ms []*grain.Message) (int, error) {
	if ms[0].Message == "first" {
		select {
		case <-b.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(ms))
	for i, m := range ms {
		b.attempt[m.Message] = m.Attempt
		if m.Message == "retry" && m.Attempt == 1 {
			return i, grain.Retry(time.Millisecond, "once more")
		}
		b.handled = append(b.handled, m.Message)
	}
	return len(ms), nil
}

// Messages published in one SDK call (PublishBatch) each get a result, a
// refused one failing alone; what waited while the subscriber was busy
// reaches it in batches, in publish order, acknowledged by position: the
// message the handler asked for again comes again, with its attempt
// counted, before those published after it.
func TestClusterTopicBatches(t *testing.T) {
	t.Run("etcd", func(t *testing.T) { testTopicBatches(t, "", 0) })
	t.Run("etcd-batches-of-8", func(t *testing.T) { testTopicBatches(t, "", 8) })
	t.Run("jetstream", func(t *testing.T) { testTopicBatches(t, natstest.Start(t).URL(), 0) })
}

// testTopicBatches runs it on store, with batches of at most batch
// messages (0: the default).
func testTopicBatches(t *testing.T, store string, batch int) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	b := &batcher{release: make(chan struct{}), attempt: map[string]uint32{}}
	s := c.startWith("s1", func(cfg *SiloConfig, reg *grain.Registry) {
		cfg.TopicStore = store
		if batch > 0 {
			cfg.Topics.MaxDeliveryBatch = batch
		}
		cfg.Topics.RetryMin, cfg.Topics.RetryMax = time.Millisecond, 5*time.Millisecond
		if err := reg.Register("Batcher", func(grain.Host) (grain.Agent, error) { return b, nil }); err != nil {
			t.Fatal(err)
		}
	})
	c.waitView("s1")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, []string{s.GatewayAddr()}, client.WithPrincipal("acme"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Topics().Subscribe(ctx, "Batcher:acme:b", "batch", "jobs.#"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Topics().Publish(ctx, "jobs.a", &client.Message{Message: "first"}); err != nil {
		t.Fatal(err)
	}
	var ps []client.Publication
	var want []string
	for i := range 40 {
		text := fmt.Sprint(i)
		if i == 10 {
			text = "retry"
		}
		ps = append(ps, client.Publication{Topic: "jobs.a", Message: &client.Message{Message: text}})
		want = append(want, text)
	}
	ps = append(ps[:20], append([]client.Publication{{Topic: "not a topic!", Message: &client.Message{Message: "bad"}}}, ps[20:]...)...)
	rs, err := cl.Topics().PublishBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if bad := i == 20; bad != (r.Err != nil) || (!bad && (r.ID == "" || r.Subscriptions != 1)) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if errs.Code(rs[20].Err) != codes.InvalidArgument {
		t.Fatalf("the bad topic: %v", rs[20].Err)
	}
	// All queued behind the first delivery, held: then they go in batches.
	waitFor(t, "the publishes queued", func() bool {
		subs, err := cl.Topics().Subscriptions(ctx, "")
		return err == nil && len(subs) == 1 && subs[0].Backlog == 41
	})
	close(b.release)
	waitFor(t, "every message handled", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.handled) == 41
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if got, w := fmt.Sprint(b.handled), fmt.Sprint(append([]string{"first"}, want...)); got != w {
		t.Fatalf("handled %s\nwant %s", got, w)
	}
	if b.attempt["retry"] != 2 || b.attempt["11"] != 1 {
		t.Fatalf("attempts: retry %d, 11 %d", b.attempt["retry"], b.attempt["11"])
	}
	biggest := 0
	for _, n := range b.sizes[1:] {
		biggest = max(biggest, n)
	}
	if biggest < 2 || (batch > 0 && biggest > batch) {
		t.Fatalf("batches of %v, want some of 2 or more, none over %d", b.sizes, cmp.Or(batch, 32))
	}
}
