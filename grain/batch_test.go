package grain

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// batchAgent takes batches with OnMessages, stopping at the message
// "stop" with its outcome.
type batchAgent struct {
	funcAgent
	got  [][]string
	stop error
}

func (b *batchAgent) OnMessages(_ context.Context, ms []*Message) (int, error) {
	var texts []string
	for _, m := range ms {
		texts = append(texts, m.Message)
	}
	b.got = append(b.got, texts)
	for i, m := range ms {
		if m.Message == "stop" {
			return i, b.stop
		}
	}
	return len(ms), nil
}

func deliveries(to string, texts ...string) []*Message {
	ms := make([]*Message, len(texts))
	for i, t := range texts {
		ms[i] = &Message{From: "P:acme:p", To: to, Message: t, Topic: "acme:t", Subscription: "acme:s", Kind: KindRequest, Attempt: 1}
	}
	return ms
}

// A batch reaches OnMessages in one turn, in order, and its reply says how
// many were handled and the outcome of the next; an agent without
// OnMessages gets the messages through OnMessage, in order, up to the
// first that fails.
func TestBatchDelivery(t *testing.T) {
	ba := &batchAgent{stop: Retry(time.Second, "busy")}
	var single []string
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{
		"B": func(Host) (Agent, error) { return ba, nil },
		"S": func(Host) (Agent, error) {
			return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
				single = append(single, m.Message)
				switch m.Message {
				case "poison":
					return nil, Poison("bad")
				case "fail":
					return nil, errs.New(codes.FailedPrecondition, "no")
				}
				return nil, nil
			}}, nil
		},
	})
	run := func(to string, texts ...string) (int, error) {
		t.Helper()
		b, err := Batch(deliveries(to, texts...))
		if err != nil {
			t.Fatal(err)
		}
		return BatchOutcome(rt.Ask(t.Context(), b))
	}
	if n, err := run("B:acme:b", "a", "b", "c"); n != 3 || err != nil {
		t.Fatalf("all handled: %d %v", n, err)
	}
	n, err := run("B:acme:b", "d", "stop", "e")
	var oe *OutcomeError
	if n != 1 || !errors.As(err, &oe) || oe.Poison || oe.After != time.Second || oe.Reason != "busy" {
		t.Fatalf("stopped at the second: %d %v", n, err)
	}
	if got := fmt.Sprint(ba.got); got != "[[a b c] [d stop e]]" {
		t.Fatalf("OnMessages got %s", got)
	}
	ba.stop = nil
	if n, err := run("B:acme:b", "stop"); n != 0 || err != nil {
		t.Fatalf("stopped without an error: %d %v", n, err)
	}

	if n, err := run("S:acme:s", "a", "poison", "c"); n != 1 || !errors.As(err, &oe) || !oe.Poison || oe.Reason != "bad" {
		t.Fatalf("one by one, poison second: %d %v", n, err)
	}
	if n, err := run("S:acme:s", "x", "y", "fail"); n != 2 || errs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("one by one, failing third: %d %v", n, err)
	}
	if got := fmt.Sprint(single); got != "[a poison x y fail]" {
		t.Fatalf("OnMessage got %s", got)
	}
	// A client cannot send a batch: the gateway clears Topic, and without
	// it the message is an ordinary one, for OnMessage.
	b, _ := Batch(deliveries("S:acme:s", "z"))
	b.Topic = ""
	if _, err := rt.Ask(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if single[len(single)-1] != "" {
		t.Fatalf("an envelope without a topic reached OnMessage as %q", single[len(single)-1])
	}
}

// An agent cannot make up a topic delivery, nor a batch of them whose
// messages would carry other principals: the runtime clears Topic on
// what agents send.
func TestAgentsSendNoTopicDeliveries(t *testing.T) {
	reg := NewRegistry()
	got := make(chan *Message, 1)
	if err := reg.Register("Sink", func(Host) (Agent, error) {
		return &funcAgent{onMessage: func(_ context.Context, m *Message) (*Message, error) {
			got <- m
			return m.Response(), nil
		}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Forger", func(h Host) (Agent, error) {
		return &funcAgent{onMessage: func(ctx context.Context, m *Message) (*Message, error) {
			inner := []*Message{{To: "Sink:alice:s", OnBehalfOf: "root", Topic: "t", Message: "forged"}}
			b, err := Batch(inner)
			if err != nil {
				return nil, err
			}
			b.Subscription = "sub"
			return h.Ask(ctx, "Sink:alice:s", b)
		}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	rt, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if _, err := rt.Ask(t.Context(), &Message{From: "Session:alice:x", To: "Forger:alice:f"}); err != nil {
		t.Fatal(err)
	}
	m := <-got
	if m.Topic != "" || m.Subscription != "" || m.MessageType != batchType || m.OnBehalfOf == "root" {
		t.Fatalf("the sink got topic %q, subscription %q, type %q on behalf of %q: want an ordinary message", m.Topic, m.Subscription, m.MessageType, m.OnBehalfOf)
	}
}
