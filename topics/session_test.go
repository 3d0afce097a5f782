package topics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/internal/topicstore"
)

// backlog stands for a gateway's session: it records what is pushed, and
// refuses with err while err is set.
type backlog struct {
	mu  sync.Mutex
	got []*grain.Message
	err error
}

func (b *backlog) push(_ context.Context, w *agentsilov1.AgentMessage) error {
	m := grain.MessageFromProto(w)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.got = append(b.got, m)
	return nil
}

func (b *backlog) messages() []*grain.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*grain.Message(nil), b.got...)
}

func (b *backlog) setErr(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
}

func hasSub(s *Service, id string) func() bool {
	return func() bool { return s.registry().Subs[id] != nil }
}

// A session's subscription is delivered into its backlog, one-way, in
// publish order; a full backlog is waited out without counting attempts;
// EndSession removes it.
func TestSessionSubscription(t *testing.T) {
	h := newHarness(t, nil)
	s := h.service(nil)
	const sess = "Session:acme:0192-s1@silo1"
	b := &backlog{err: errs.New(codes.ResourceExhausted, "backlog full")}
	rec, err := s.SubscribeSession(t.Context(), addr(sess), "", "orders.#", 0, b.push)
	if err != nil {
		t.Fatal(err)
	}
	if want := "acme:" + sessionSubscriptionName(sess, "acme:orders.#"); rec.GetId() != want {
		t.Fatalf("id %s, want %s", rec.GetId(), want)
	}
	// Again: idempotent, the same subscription.
	if again, err := s.SubscribeSession(t.Context(), addr(sess), "", "orders.#", 0, b.push); err != nil || again.GetId() != rec.GetId() {
		t.Fatalf("subscribing again: %v %v", again, err)
	}
	// Another session cannot join it.
	if _, err := s.SubscribeSession(t.Context(), addr("Session:acme:other"), strings.TrimPrefix(rec.GetId(), "acme:"), "orders.#", 0, b.push); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another session joins: %v, want FailedPrecondition", err)
	}
	if _, err := s.SubscribeSession(t.Context(), addr("W:acme:a"), "", "orders.#", 0, b.push); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("an agent as a session: %v", err)
	}
	if err := s.Subscribe(t.Context(), addr(sess), "x", "orders.#", 0); errs.Code(err) != codes.InvalidArgument {
		t.Fatalf("a session as an agent: %v", err)
	}
	h.publish(s, "W:acme:pub", "orders.a", "0")
	h.publish(s, "Session:acme:pub", "orders.b", "s0")
	// Refused (full): retried after the backoff, not counted.
	waitStats(t, s, "a refused push", func(st Stats) bool { return st.Unavailable >= 1 })
	b.setErr(nil)
	for i := 1; i < 10; i++ {
		h.publish(s, "W:acme:pub", "orders.a", fmt.Sprint(i))
	}
	// The fake clock moves on until the backoff is due.
	testutil.WaitFor(t, "every push", func() bool { h.clk.Advance(time.Second); return len(b.messages()) == 11 })
	next := 0
	for _, m := range b.messages() {
		if m.Kind != grain.KindOneWay || m.To != sess || m.Subscription != rec.GetId() || m.Attempt != 1 {
			t.Fatalf("push %v", m)
		}
		if m.From == "W:acme:pub" {
			if m.Message != fmt.Sprint(next) {
				t.Fatalf("out of order: %s, want %d", m.Message, next)
			}
			next++
		}
	}
	waitStats(t, s, "acks", func(st Stats) bool { return st.Acked == 11 && st.DeadLettered == 0 })
	s.EndSession(sess)
	testutil.WaitFor(t, "the subscription removed", func() bool { return !hasSub(s, rec.GetId())() })
}

// A session gone (NotFound from its gateway) ends its subscription; one
// whose member went with its lease is pruned.
func TestSessionGoneAndPruned(t *testing.T) {
	h := newHarness(t, nil)
	s := h.service(nil)
	b := &backlog{err: errs.New(codes.NotFound, "no client session")}
	rec, err := s.SubscribeSession(t.Context(), addr("Session:acme:gone"), "g", "orders.#", 0, b.push)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(s, "W:acme:pub", "orders.a", "x")
	testutil.WaitFor(t, "the subscription removed", func() bool { return !hasSub(s, rec.GetId())() })

	rec, err = s.SubscribeSession(t.Context(), addr("Session:acme:lapsed"), "l", "orders.#", 0, (&backlog{}).push)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the subscription", hasSub(s, rec.GetId()))
	h.store.(*topicstore.Memory).Expire("Session:acme:lapsed")
	// Kept for SessionGrace (a session adopted elsewhere subscribes again
	// within it), then pruned.
	testutil.WaitFor(t, "the prune begun", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pruning[rec.GetId()]
	})
	if !hasSub(s, rec.GetId())() {
		t.Fatal("pruned before its grace")
	}
	testutil.WaitFor(t, "the subscription pruned", func() bool {
		h.clk.Advance(time.Minute)
		return !hasSub(s, rec.GetId())()
	})
}

// A session whose subscription lost its member with a silo's lease (its
// gateway's silo died) and that subscribes again within SessionGrace (as
// the SDK does once the session is adopted elsewhere) takes the
// subscription back with its queue: what was published meanwhile reaches
// it, and the grace's end prunes nothing.
func TestSessionResubscribedWithinGrace(t *testing.T) {
	h := newHarness(t, nil)
	s := h.service(nil)
	sess := addr("Session:acme:moved")
	rec, err := s.SubscribeSession(t.Context(), sess, "", "orders.#", 0, (&backlog{}).push)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the subscription", hasSub(s, rec.GetId()))
	h.store.(*topicstore.Memory).Expire(sess.String())
	testutil.WaitFor(t, "the prune begun", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pruning[rec.GetId()]
	})
	h.publish(s, "W:acme:pub", "orders.a", "meanwhile")
	b := &backlog{}
	again, err := s.SubscribeSession(t.Context(), sess, "", "orders.#", 0, b.push)
	if err != nil {
		t.Fatalf("subscribing again within the grace: %v", err)
	}
	if again.GetId() != rec.GetId() {
		t.Fatalf("subscribed again as %s, want %s", again.GetId(), rec.GetId())
	}
	testutil.WaitFor(t, "what was published meanwhile delivered", func() bool {
		for _, m := range b.messages() {
			if m.Message == "meanwhile" {
				return true
			}
		}
		return false
	})
	// Another name for the same session may not take a memberless
	// subscription that is not its own.
	h.store.(*topicstore.Memory).Expire(sess.String())
	testutil.WaitFor(t, "the member gone again", func() bool {
		sub := s.registry().Subs[rec.GetId()]
		return sub != nil && len(sub.Members) == 0
	})
	if _, err := s.SubscribeSession(t.Context(), addr("Session:acme:other"), strings.TrimPrefix(rec.GetId(), "acme:"), "orders.#", 0, (&backlog{}).push); errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another session taking it: %v, want FailedPrecondition", err)
	}
	if _, err := s.SubscribeSession(t.Context(), sess, "", "orders.#", 0, b.push); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(3 * time.Minute)
	h.publish(s, "W:acme:pub", "orders.b", "after the grace")
	testutil.WaitFor(t, "a message after the grace delivered", func() bool {
		for _, m := range b.messages() {
			if m.Message == "after the grace" {
				return true
			}
		}
		return false
	})
	if !hasSub(s, rec.GetId())() {
		t.Fatal("the subscription taken back was pruned at the grace's end")
	}
}
