package grain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// twoSilos is an in-memory Placement for two runtimes: every address is owned
// by one of them, as owner says; Forward calls the other runtime directly.
// (cluster's router is the real Placement; these tests pin the runtime's
// side of the contract.)
type twoSilos struct {
	mu    sync.RWMutex
	owner string // "a" or "b": the owner of every address
	rts   map[string]*Runtime
}

type siloPlacement struct {
	p    *twoSilos
	self string
}

func (s siloPlacement) Route(string) string {
	s.p.mu.RLock()
	defer s.p.mu.RUnlock()
	if s.p.owner == s.self {
		return ""
	}
	return s.p.owner
}

func (s siloPlacement) Claim(context.Context, string) (func(), error) {
	s.p.mu.RLock()
	if s.p.owner != s.self {
		s.p.mu.RUnlock()
		return nil, siloapi.ErrMoved
	}
	return s.p.mu.RUnlock, nil
}

func (s siloPlacement) Hold(string) (bool, func()) {
	s.p.mu.RLock()
	return s.p.owner == s.self, s.p.mu.RUnlock
}

func (s siloPlacement) Serving() bool { return true }

func (s siloPlacement) Forward(ctx context.Context, silo string, m *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error) {
	rt := siloRuntime{s.p.rts[silo]}
	if m.Kind == agentsilov1.Kind_KIND_REQUEST {
		return rt.AskRemote(ctx, m, hops+1)
	}
	return nil, rt.SendRemote(ctx, m, hops+1)
}

// move makes silo the owner of every address, as a view change does, and
// has the old owner deactivate what moved (Rehome).
func (p *twoSilos) move(t *testing.T, silo string) {
	t.Helper()
	p.mu.Lock()
	old := p.owner
	p.owner = silo
	p.mu.Unlock()
	if err := p.rts[old].rehome(t.Context(), func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
}

// An address lives on its owner; after a move, its activation on the old
// owner ends (OnDeactivate with ReasonMoved) before the new owner's starts,
// and one-way messages queued at the old one follow it in order.
func TestPlacementMoveKeepsOneActivationAndOrder(t *testing.T) {
	var mu sync.Mutex
	var events []string // "start a", "end a", "start b"...
	got := map[string][]int{}
	release, inBlock := make(chan struct{}), make(chan struct{})
	p := &twoSilos{owner: "a", rts: map[string]*Runtime{}}
	for _, silo := range []string{"a", "b"} {
		cfg := DefaultConfig()
		cfg.Silo = silo
		siloapi.Wire(&cfg, siloapi.Wiring{Placement: siloPlacement{p: p, self: silo}})
		p.rts[silo] = newRuntime(t, cfg, map[string]Factory{"Seq": func(h Host) (Agent, error) {
			return &funcAgent{
				onActivate: func(context.Context) error {
					mu.Lock()
					events = append(events, "start "+silo)
					mu.Unlock()
					return nil
				},
				onDeactivate: func(_ context.Context, r Reason) {
					mu.Lock()
					events = append(events, fmt.Sprintf("end %s %v", silo, r))
					mu.Unlock()
				},
				onMessage: func(_ context.Context, m *Message) (*Message, error) {
					if m.Message == "block" {
						close(inBlock)
						<-release
						return reply(m, silo)
					}
					var n int
					fmt.Sscan(m.Message, &n)
					mu.Lock()
					got[silo] = append(got[silo], n)
					mu.Unlock()
					return reply(m, silo)
				},
			}, nil
		}})
	}
	a, b := p.rts["a"], p.rts["b"]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := b.Ask(ctx, &Message{To: "Seq:o:x", From: "Client:o:c", Message: "0"})
	if err != nil || r.Message != "a" {
		t.Fatalf("ask through b: %v, %v; want the answer of a, the owner", r, err)
	}
	if b.Len() != 0 || a.Len() != 1 {
		t.Fatalf("activations: a %d, b %d", a.Len(), b.Len())
	}

	// A turn in progress on a; one-way messages queue behind it.
	blocked := make(chan error, 1)
	go func() {
		_, err := a.Ask(ctx, &Message{To: "Seq:o:x", From: "Client:o:c", Message: "block"})
		blocked <- err
	}()
	<-inBlock
	for i := 1; i <= 20; i++ {
		if err := a.Send(ctx, &Message{To: "Seq:o:x", From: "Client:o:c", Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		p.move(t, "b")
	}()
	// Once routing says b, new messages go to b, where the address may
	// start only after a's activation ended.
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	<-moved
	for i := 21; i <= 30; i++ {
		if err := a.Send(ctx, &Message{To: "Seq:o:x", From: "Client:o:c", Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err = a.Ask(ctx, &Message{To: "Seq:o:x", From: "Client:o:c", Message: "31"})
	if err != nil || r.Message != "b" {
		t.Fatalf("after the move: %v, %v; want the answer of b", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) < 3 || events[0] != "start a" || events[1] != "end a moved" || events[2] != "start b" {
		t.Fatalf("lifecycle %v: want a to end (moved) before b starts", events)
	}
	all := append(append([]int{}, got["a"]...), got["b"]...)
	for i, n := range all {
		if n != i {
			t.Fatalf("messages handled in order %v (a %v, b %v)", all, got["a"], got["b"])
		}
	}
}

// Release returns only once the activation has ended.
func TestReleaseWaitsForTheEnd(t *testing.T) {
	ended := make(chan struct{})
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{"E": func(Host) (Agent, error) {
		return &funcAgent{
			onMessage:    func(_ context.Context, m *Message) (*Message, error) { return reply(m, "") },
			onDeactivate: func(context.Context, Reason) { close(ended) },
		}, nil
	}})
	if _, err := rt.Ask(t.Context(), &Message{To: "E:o:x", From: "Client:o:c"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.release(t.Context(), "E:o:x"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("Release returned before OnDeactivate ran")
	}
	if rt.Len() != 0 {
		t.Fatalf("%d activations after Release", rt.Len())
	}
}

// TryAskRemote takes a forwarded request only for a live activation, and
// then answers through done.
func TestTryAskRemote(t *testing.T) {
	rt := newRuntime(t, DefaultConfig(), map[string]Factory{"Echo": echoFactory})
	msg := func(text string) *Message {
		return &Message{ID: NewID(), To: "Echo:o:x", From: "Client:o:c", Message: text}
	}
	if rt.tryAskRemote(t.Context(), msg("a"), 1, false, func(*agentsilov1.AgentMessage, error) { t.Error("done called") }) {
		t.Fatal("taken without a live activation")
	}
	if _, err := rt.askRemote(t.Context(), msg("warm"), 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Message, 1)
	m := msg("b")
	if !rt.tryAskRemote(t.Context(), m, 1, false, func(r *agentsilov1.AgentMessage, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- fromWire(r)
	}) {
		t.Fatal("not taken for a live activation")
	}
	r := <-got
	if r.Message != "b" || r.CorrelationID != m.ID || r.Kind != KindResponse {
		t.Fatalf("reply %v", r)
	}
	if rt.tryAskRemote(t.Context(), &Message{ID: NewID(), To: "Echo:o:x", MessageType: "_silo.x"}, 1, false, nil) {
		t.Fatal("a reserved message type was taken")
	}
}

// TryAskRemote asks the placement for the owner unless the sender routed
// with this silo's view (owned): a live activation whose address the
// placement now routes elsewhere takes the request only then.
func TestTryAskRemoteOwned(t *testing.T) {
	p := &twoSilos{owner: "a", rts: map[string]*Runtime{}}
	cfg := DefaultConfig()
	cfg.Silo = "a"
	siloapi.Wire(&cfg, siloapi.Wiring{Placement: siloPlacement{p: p, self: "a"}})
	rt := newRuntime(t, cfg, map[string]Factory{"Echo": echoFactory})
	p.rts["a"] = rt
	msg := func() *Message { return &Message{ID: NewID(), To: "Echo:o:x", From: "Client:o:c"} }
	if _, err := rt.askRemote(t.Context(), msg(), 1); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.owner = "b" // a newer view, not yet swept: the activation is still live here
	p.mu.Unlock()
	if rt.tryAskRemote(t.Context(), msg(), 1, false, func(*agentsilov1.AgentMessage, error) { t.Error("done called") }) {
		t.Fatal("taken for an address the placement routes elsewhere")
	}
	got := make(chan error, 1)
	if !rt.tryAskRemote(t.Context(), msg(), 1, true, func(_ *agentsilov1.AgentMessage, err error) { got <- err }) {
		t.Fatal("not taken with owned set")
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// refusing is a Placement that owns every address but refuses to claim
// any, as a fenced silo does.
type refusing struct{}

func (refusing) Route(string) string { return "" }
func (refusing) Claim(context.Context, string) (func(), error) {
	return nil, errs.New(codes.Unavailable, "silo x is fenced")
}
func (refusing) Hold(string) (bool, func()) { return true, func() {} }
func (refusing) Serving() bool              { return true }
func (refusing) Forward(context.Context, string, *agentsilov1.AgentMessage, int) (*agentsilov1.AgentMessage, error) {
	return nil, errs.New(codes.Internal, "not forwarded")
}

// A message refused because its activation could not be claimed was not
// run: its error says so (ErrNotRun, which the silo's transport and
// gateway pass on, so that it is sent again), and keeps its code.
func TestClaimRefusalIsNotRun(t *testing.T) {
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Placement: refusing{}})
	rt := newRuntime(t, cfg, map[string]Factory{"Echo": echoFactory})
	_, err := rt.Ask(t.Context(), &Message{To: "Echo:o:x", From: "Client:o:c"})
	if !errors.Is(err, ErrNotRun) || errs.Code(err) != codes.Unavailable {
		t.Fatalf("Ask refused by Claim: %v (code %v, not run %t)", err, errs.Code(err), errors.Is(err, ErrNotRun))
	}
	var nr interface{ NotRun() bool }
	if !errors.As(err, &nr) || !nr.NotRun() {
		t.Fatalf("%v has no NotRun method saying true", err)
	}
	if rt.Len() != 0 {
		t.Fatalf("%d activations after a refused claim", rt.Len())
	}
}

// elsewhere is a Placement that owns nothing: every address is on silo
// "b", whose Forward waits for proceed.
type elsewhere struct{ entered, proceed chan struct{} }

func (elsewhere) Route(string) string                           { return "b" }
func (elsewhere) Claim(context.Context, string) (func(), error) { return nil, siloapi.ErrMoved }
func (elsewhere) Hold(string) (bool, func())                    { return false, func() {} }
func (elsewhere) Serving() bool                                 { return true }

func (p elsewhere) Forward(ctx context.Context, silo string, m *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error) {
	close(p.entered)
	<-p.proceed
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := m.Response()
	r.Message = silo
	return r, nil
}

// A request left in the mailbox of an activation whose address moved is
// sent on to the new owner, and its reply reaches its caller: the context
// it is sent with lasts until then (it was once cancelled as soon as the
// request had been handed to its sending goroutine).
func TestRerouteRequestOutlivesTheHandOff(t *testing.T) {
	p := elsewhere{entered: make(chan struct{}), proceed: make(chan struct{})}
	cfg := DefaultConfig()
	siloapi.Wire(&cfg, siloapi.Wiring{Placement: p})
	rt := newRuntime(t, cfg, map[string]Factory{"Echo": echoFactory})
	env := &envelope{msg: &Message{Kind: KindRequest, To: "Echo:o:x", From: "Client:o:c", ID: "1"}, reply: make(chan result, 1)}
	rt.reroute([]*envelope{env})
	<-p.entered
	close(p.proceed)
	r := <-env.reply
	if r.err != nil || r.msg.Message != "b" {
		t.Fatalf("rerouted request: %v, %v; want the answer of b", r.msg, r.err)
	}
}
