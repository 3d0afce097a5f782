package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/grain"
)

// recorder records the sequence numbers it receives, of every kind.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) note(m *grain.Message) {
	r.mu.Lock()
	r.got = append(r.got, m.Message)
	r.mu.Unlock()
}

func (r *recorder) OnMessage(_ context.Context, m *grain.Message) (*grain.Message, error) {
	r.note(m)
	return nil, nil
}

func (r *recorder) OnEvent(_ context.Context, m *grain.Message) error {
	r.note(m)
	return nil
}

// Per-sender order across silos: an agent on one silo sends another on
// another silo one-way messages, events and requests interleaved (runs of
// one-way messages and events, each followed by an Ask), and they arrive in
// the order sent, whatever their kind.
func TestClusterPerSenderOrder(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions()...)
	c := newTestCluster(t)
	defer c.close()
	rec := &recorder{}
	conf := func(_ *SiloConfig, reg *grain.Registry) {
		if err := reg.Register("Recorder", func(grain.Host) (grain.Agent, error) { return rec, nil }); err != nil {
			t.Fatal(err)
		}
		err := reg.Register("Sender", func(h grain.Host) (grain.Agent, error) {
			return agentFunc(func(ctx context.Context, m *grain.Message) (*grain.Message, error) {
				to := m.State["to"]
				n, _ := strconv.Atoi(m.State["n"])
				for i := range n {
					seq := &grain.Message{Message: strconv.Itoa(i)}
					var err error
					switch {
					case i%10 == 9:
						_, err = h.Ask(ctx, to, seq)
					case i%3 == 0:
						err = h.Event(ctx, to, seq)
					default:
						err = h.Send(ctx, to, seq)
					}
					if err != nil {
						return nil, err
					}
				}
				return nil, nil
			}), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	c.startWith("s1", conf)
	c.startWith("s2", conf)
	c.waitView("s1", "s2")
	names := []string{"s1", "s2"}
	var sender, receiver string
	for i := 0; sender == "" || receiver == ""; i++ {
		if a := fmt.Sprintf("Sender:o:s%d", i); sender == "" && Owner(a, names) == "s1" {
			sender = a
		}
		if a := fmt.Sprintf("Recorder:o:r%d", i); receiver == "" && Owner(a, names) == "s2" {
			receiver = a
		}
	}
	const n = 3000
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	s1 := c.silos["s1"]
	if _, err := s1.Runtime().Ask(ctx, &grain.Message{To: sender, From: "Client:o:x", State: map[string]string{"to": receiver, "n": strconv.Itoa(n)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.got) == n
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, s := range rec.got {
		if s != strconv.Itoa(i) {
			t.Fatalf("message %d arrived as number %d: %v", i, i, rec.got[max(i-5, 0):min(i+5, n)])
		}
	}
}
