package topics_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/topics"
)

// Audit subscribes itself to every order of its owner when told to start,
// and reports each delivery on got.
type Audit struct {
	h   grain.Host
	got chan string
}

func (a *Audit) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Topic == "" { // a message sent to the agent, not a delivery
		return m.Response(), a.h.Subscribe(ctx, "audit", "orders.#")
	}
	a.got <- fmt.Sprintf("%s got %q on %s (subscription %s, attempt %d)", a.h.Address(), m.Message, m.Topic, m.Subscription, m.Attempt)
	return nil, nil // acknowledged
}

// Shop publishes an order for each message it gets.
type Shop struct{ h grain.Host }

func (s *Shop) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	_, err := s.h.Publish(ctx, "orders.created.eu", &grain.Message{Message: m.Message})
	return m.Response(), err
}

// A runtime of its own with topics in memory: one agent subscribes, another
// publishes, the subscriber gets the message. In a silo (package cluster)
// the agents are the same; the silo makes the Service, on etcd or NATS
// JetStream.
func Example() {
	ctx := context.Background()
	got := make(chan string, 1)
	reg := grain.NewRegistry()
	if err := reg.Register("Audit", func(h grain.Host) (grain.Agent, error) { return &Audit{h: h, got: got}, nil }); err != nil {
		log.Fatal(err)
	}
	if err := reg.Register("Shop", func(h grain.Host) (grain.Agent, error) { return &Shop{h: h}, nil }); err != nil {
		log.Fatal(err)
	}

	svc, err := topics.New(topics.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	cfg := grain.DefaultConfig()
	cfg.Topics = svc
	rt, err := grain.New(cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	svc.Start(rt.Ask) // deliveries go through the runtime
	defer rt.Close(ctx)
	defer svc.Close(ctx) // first: deliveries in flight settle

	if _, err := rt.Ask(ctx, &grain.Message{To: "Audit:acme:books", Message: "start"}); err != nil {
		log.Fatal(err)
	}
	if _, err := rt.Ask(ctx, &grain.Message{To: "Shop:acme:eu", Message: "order 42"}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)
	// Output: Audit:acme:books got "order 42" on acme:orders.created.eu (subscription acme:audit, attempt 1)
}

func ExamplePattern_Match() {
	// A relative name or pattern belongs to the sender's owner.
	p, err := topics.ParsePattern("orders.*.eu", "acme")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []string{"orders.created.eu", "orders.created.us", "orders.eu", "globex:orders.created.eu"} {
		t, err := topics.ParseTopic(s, "acme")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s matches %s: %v\n", p, t, p.Match(t))
	}
	// `#` takes zero or more segments.
	fmt.Println(topics.MatchName("orders.#", "orders"), topics.MatchName("orders.#", "orders.created.eu"))
	// A segment may not be empty.
	_, err = topics.ParseTopic("orders..eu", "acme")
	fmt.Println(err != nil)
	// Output:
	// acme:orders.*.eu matches acme:orders.created.eu: true
	// acme:orders.*.eu matches acme:orders.created.us: false
	// acme:orders.*.eu matches acme:orders.eu: false
	// acme:orders.*.eu matches globex:orders.created.eu: false
	// true true
	// true
}
