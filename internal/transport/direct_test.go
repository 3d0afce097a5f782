package transport

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentsilo/agentsilo/internal/testutil"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// orderedAsync is a Handler that is also an AsyncHandler and an
// OrderedHandler, as the silo's is. It records, per receiver, the texts of
// the messages in the order they were handed to it. TryHandleRequest takes
// the requests whose text ends in "t" (answering at once, as a post to an
// idle mailbox would later) and leaves the others to PostRequest, which
// answers from a goroutine of its own. gate, if set, is called by
// HandleOneWay before it records.
type orderedAsync struct {
	testHandler
	gate  func(text string)
	noLog bool // record nothing (benchmarks)

	mu  sync.Mutex
	got map[string][]string
}

func newOrderedAsync() *orderedAsync {
	h := &orderedAsync{got: make(map[string][]string)}
	h.serve = h
	return h
}

func (h *orderedAsync) note(env *Envelope) {
	if h.noLog {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got[env.Message.To] = append(h.got[env.Message.To], env.Message.Message)
}

func (h *orderedAsync) log(to string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got[to])
}

func echo(env *Envelope) *agentsilov1.AgentMessage {
	r := env.Message.Response()
	r.Message = "echo:" + env.Message.Message
	return r
}

func (h *orderedAsync) HandleOneWay(_ context.Context, _ string, env *Envelope) {
	if h.gate != nil {
		h.gate(env.Message.Message)
	}
	h.note(env)
}

func (h *orderedAsync) TryHandleRequest(_ context.Context, _ string, env *Envelope, reply func(*agentsilov1.AgentMessage, error)) bool {
	if !strings.HasSuffix(env.Message.Message, "t") {
		return false
	}
	h.note(env)
	reply(echo(env), nil)
	return true
}

func (h *orderedAsync) PostRequest(_ context.Context, _ string, env *Envelope, reply func(*agentsilov1.AgentMessage, error)) {
	h.note(env)
	go reply(echo(env), nil)
}

// receivers returns n receiver addresses on n different lanes.
func receivers(n int) []string {
	var out []string
	used := make(map[int]bool)
	for i := 0; len(out) < n; i++ {
		to := fmt.Sprintf("Echo:acme:r%d", i)
		if l := lane(to); !used[l] {
			used[l] = true
			out = append(out, to)
		}
	}
	return out
}

func envTo(to, text string) *Envelope {
	return &Envelope{Message: &agentsilov1.AgentMessage{To: to, From: "Caller:acme:y", Message: text, Id: text}}
}

// A request that the reader could hand on itself (TryHandleRequest takes
// it) still waits for what its sender sent its receiver before it: here a
// one-way message that its lane holds.
func TestTransportRequestBehindLane(t *testing.T) {
	checkLeaks(t)
	h := newOrderedAsync()
	open := make(chan struct{})
	h.gate = func(text string) {
		if text == "w0" {
			<-open
		}
	}
	b := startSilo(t, "b", "127.0.0.2:0", &h.testHandler, nil, nil)
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	t.Cleanup(func() {
		select {
		case <-open:
		default:
			close(open)
		}
	})
	ctx := context.Background()
	rs := receivers(2)
	r, other := rs[0], rs[1]
	if err := a.tr.Send(ctx, b.addr, envTo(r, "w0")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		m, err := a.tr.Ask(ctx, b.addr, envTo(r, "a1t"))
		if err == nil && m.Message != "echo:a1t" {
			err = fmt.Errorf("reply %q", m.Message)
		}
		errc <- err
	}()
	// An Ask to another lane, sent after a1t was (its sender queued it
	// first): once it is answered, b's reader has read a1t.
	waitAsked(t, a, b.addr)
	if _, err := a.tr.Ask(ctx, b.addr, envTo(other, "x2t")); err != nil {
		t.Fatal(err)
	}
	if got := h.log(r); len(got) != 0 {
		t.Fatalf("%s got %q while its lane held w0", r, got)
	}
	close(open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got, want := h.log(r), []string{"w0", "a1t"}; !slices.Equal(got, want) {
		t.Fatalf("%s got %q, want %q", r, got, want)
	}
}

// waitAsked waits until an Ask of a to the peer at addr is pending and
// nothing is left in its queue: the request was written to the stream.
func waitAsked(t *testing.T, a *testSilo, addr string) {
	t.Helper()
	a.tr.mu.RLock()
	p := a.tr.peers[addr]
	a.tr.mu.RUnlock()
	testutil.WaitFor(t, "the ask written", func() bool {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		return n > 0 && p.w.queued.Load() == 0
	})
}

// Each sender's messages reach each of its receivers in the order sent,
// one-way messages and requests alike, whether a request was written by
// its caller or by the sender goroutine, and handed on by the stream's
// reader or by its lane.
func TestTransportOrderMixed(t *testing.T) {
	checkLeaks(t)
	h := newOrderedAsync()
	b := startSilo(t, "b", "127.0.0.2:0", &h.testHandler, nil, nil)
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	ctx := context.Background()
	const senders, msgs = 4, 300
	rs := receivers(senders)
	errc := make(chan error, senders)
	for s := range senders {
		go func() {
			to := rs[s]
			for i := range msgs {
				text := fmt.Sprint(i)
				var err error
				switch i % 4 {
				case 0, 1:
					err = a.tr.Send(ctx, b.addr, envTo(to, text))
				case 2:
					_, err = a.tr.Ask(ctx, b.addr, envTo(to, text+"t"))
				case 3:
					_, err = a.tr.Ask(ctx, b.addr, envTo(to, text+"p"))
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range senders {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, to := range rs {
		got := h.log(to)
		if len(got) != msgs {
			t.Fatalf("%s got %d messages, want %d", to, len(got), msgs)
		}
		for i, text := range got {
			if n := strings.TrimRight(text, "tp"); n != fmt.Sprint(i) {
				t.Fatalf("%s: message %d is %q: out of order (%q)", to, i, text, got)
			}
		}
	}
}
