package grain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/testutil"
)

// loop is the fixture of the interleaving tests: a type Loop whose
// prompts (requests without a message type) hold their turn until the
// test releases them, as a model agent's turn holds its agent for
// minutes, with skills that read what the turn did:
//
//   - status (interleaving) and peek (not) answer "activation N running=B
//     log=[...]";
//   - hold (interleaving) waits until the test lets it go;
//   - boom (interleaving) panics; relay (interleaving) asks Echo:r;
//   - a one-way message of type note is written to the log.
type loop struct {
	rt *Runtime

	started chan string   // a prompt's turn began (its text)
	release chan struct{} // closed: prompts' turns end
	held    chan struct{} // a hold request began
	unhold  chan struct{} // closed: hold requests return
	gate    chan struct{} // if not nil, OnActivate waits until it is closed
	entered chan struct{} // OnActivate began (buffered)
	ended   chan Reason   // OnDeactivate's reasons (buffered)

	activations atomic.Int32

	mu      sync.Mutex // guards running and log: interleaving requests read them beside the turn
	running bool
	log     []string
}

const loopAddr = "Loop:o:a"

func newLoop(t *testing.T, mailboxSize int, gated bool) *loop {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the runtime's Close
	l := &loop{
		started: make(chan string, 16),
		release: make(chan struct{}),
		held:    make(chan struct{}, 16),
		unhold:  make(chan struct{}),
		entered: make(chan struct{}, 16),
		ended:   make(chan Reason, 16),
	}
	if gated {
		l.gate = make(chan struct{})
	}
	reg := NewRegistry()
	info := TypeInfo{
		Skills: []Skill{
			{Name: "status", Interleave: true},
			{Name: "peek"},
			{Name: "hold"}, // made interleaving below, as a typed skill would be
			{Name: "boom", Interleave: true},
			{Name: "relay", Interleave: true},
		},
		MailboxSize: mailboxSize,
	}
	info.Skills[2] = info.Skills[2].Interleaving()
	if err := reg.Register("Loop", l.factory, info); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("Echo", echoFactory); err != nil {
		t.Fatal(err)
	}
	l.rt = startRuntime(t, DefaultConfig(), reg)
	t.Cleanup(func() {
		// Whatever the test left held ends, so that Close returns.
		closeOnce(l.release)
		closeOnce(l.unhold)
		if l.gate != nil {
			closeOnce(l.gate)
		}
	})
	return l
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func (l *loop) factory(h Host) (Agent, error) {
	n := l.activations.Add(1)
	return &funcAgent{
		onActivate: func(ctx context.Context) error {
			l.entered <- struct{}{}
			if l.gate != nil {
				select {
				case <-l.gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
		onDeactivate: func(_ context.Context, r Reason) { l.ended <- r },
		onMessage: func(ctx context.Context, m *Message) (*Message, error) {
			switch m.MessageType {
			case "":
				l.mu.Lock()
				l.running = true
				l.log = append(l.log, "turn:"+m.Message)
				l.mu.Unlock()
				l.started <- m.Message
				select {
				case <-l.release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				l.mu.Lock()
				l.running = false
				l.log = append(l.log, "end:"+m.Message)
				l.mu.Unlock()
				return reply(m, "answered "+m.Message)
			case "status", "peek":
				l.mu.Lock()
				defer l.mu.Unlock()
				return reply(m, fmt.Sprintf("activation %d running=%v log=%s", n, l.running, strings.Join(l.log, ",")))
			case "hold":
				l.held <- struct{}{}
				select {
				case <-l.unhold:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return reply(m, "let go")
			case "boom":
				panic("boom")
			case "relay":
				r, err := h.Ask(ctx, "Echo:r", &Message{Message: "via " + m.Message})
				if err != nil {
					return nil, err
				}
				return reply(m, r.Message)
			case "note":
				l.mu.Lock()
				l.log = append(l.log, "note:"+m.Message)
				l.mu.Unlock()
				return nil, nil
			}
			return nil, errs.New(codes.InvalidArgument, "no skill %q", m.MessageType)
		},
	}, nil
}

func (l *loop) ask(ctx context.Context, skill, text string) (string, error) {
	r, err := l.rt.Ask(ctx, &Message{From: "Session:o:s", To: loopAddr, MessageType: skill, Message: text})
	if err != nil {
		return "", err
	}
	return r.Message, nil
}

// prompt starts a prompt's turn and waits until it holds the agent; its
// answer comes on the channel returned.
func (l *loop) prompt(t *testing.T, text string) <-chan error {
	t.Helper()
	done := l.askAsync(t, "", text, "answered "+text)
	select {
	case got := <-l.started:
		if got != text {
			t.Fatalf("turn %q began, want %q", got, text)
		}
	case err := <-done:
		t.Fatalf("prompt %q: %v before its turn began", text, err)
	case <-testutil.WaitContext(t).Done():
		t.Fatalf("the turn of %q did not begin", text)
	}
	return done
}

// askAsync asks skill on a goroutine of its own; the channel gets nil if
// the reply starts with want, else the error.
func (l *loop) askAsync(t *testing.T, skill, text, want string) <-chan error {
	done := make(chan error, 1)
	go func() {
		got, err := l.ask(testutil.WaitContext(t), skill, text)
		if err == nil && !strings.HasPrefix(got, want) {
			err = fmt.Errorf("%s %q: reply %q, want %q...", skill, text, got, want)
		}
		done <- err
	}()
	return done
}

func (l *loop) activation() *activation { return l.rt.dir.get(loopAddr) }

// waitQueued waits until n messages are queued at the agent's activation.
func (l *loop) waitQueued(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d messages queued at %s", n, loopAddr), func() bool {
		a := l.activation()
		return a != nil && a.mb.UserMessageCount() == n
	})
}

func wait(t *testing.T, what string, c <-chan error) {
	t.Helper()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-testutil.WaitContext(t).Done():
		t.Fatalf("gave up waiting for %s", what)
	}
}

func notYet(t *testing.T, what string, c <-chan error) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s returned (%v) while the turn held the agent", what, err)
	default:
	}
}

// An interleaving skill is answered while a turn holds the agent, however
// many ask at once; a skill that does not interleave waits for the turn.
func TestInterleaveDuringTurn(t *testing.T) {
	l := newLoop(t, 0, false)
	ctx := t.Context()
	if got, err := l.ask(ctx, "status", ""); err != nil || got != "activation 1 running=false log=" {
		t.Fatalf("status of an idle agent = %q, %v", got, err) // runs as a turn of its own
	}
	first := l.prompt(t, "p1")

	got, err := l.ask(ctx, "status", "")
	if err != nil || got != "activation 1 running=true log=turn:p1" {
		t.Fatalf("status during the turn = %q, %v", got, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, err := l.ask(ctx, "status", ""); err != nil || !strings.Contains(got, "running=true") {
				t.Errorf("concurrent status = %q, %v", got, err)
			}
		})
	}
	wg.Wait()

	peek := l.askAsync(t, "peek", "", "activation 1 running=false log=turn:p1,end:p1")
	l.waitQueued(t, 1)
	notYet(t, "peek", peek)
	if got, err := l.ask(ctx, "status", ""); err != nil || !strings.Contains(got, "running=true") {
		t.Fatalf("status beside a queued peek = %q, %v", got, err)
	}
	close(l.release)
	wait(t, "the prompt", first)
	wait(t, "peek after the turn", peek)
}

// An interleaving request keeps no place in the mailbox: it overtakes a
// one-way message its sender queued before it. Messages that queue keep
// their order.
func TestInterleaveOvertakesQueued(t *testing.T) {
	l := newLoop(t, 0, false)
	ctx := t.Context()
	done := l.prompt(t, "p1")
	if err := l.rt.Send(ctx, &Message{From: "Session:o:s", To: loopAddr, MessageType: "note", Message: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.ask(ctx, "status", ""); err != nil || got != "activation 1 running=true log=turn:p1" {
		t.Fatalf("status = %q, %v; want it before the queued note", got, err)
	}
	peek := l.askAsync(t, "peek", "", "activation 1 running=false log=turn:p1,end:p1,note:n1")
	l.waitQueued(t, 2)
	close(l.release)
	wait(t, "the prompt", done)
	wait(t, "peek, after the note", peek)
}

// An interleaving request reaches a new activation only once its
// OnActivate returned: before that, it queues.
func TestInterleaveWaitsForActivation(t *testing.T) {
	l := newLoop(t, 0, true)
	first := l.askAsync(t, "", "p1", "answered p1")
	select {
	case <-l.entered:
	case <-testutil.WaitContext(t).Done():
		t.Fatal("OnActivate did not begin")
	}
	status := l.askAsync(t, "status", "", "activation 1 running=false log=turn:p1,end:p1")
	l.waitQueued(t, 1)
	notYet(t, "status", status)
	close(l.gate)
	<-l.started
	notYet(t, "status", status) // queued behind the prompt: no longer free to interleave
	close(l.release)
	wait(t, "the prompt", first)
	wait(t, "status", status)
}

// Once a deactivation is asked for, an interleaving request queues and
// runs in the next activation; the deactivation waits for those running
// before OnDeactivate, and none runs after it began.
func TestInterleaveDeactivation(t *testing.T) {
	l := newLoop(t, 0, false)
	first := l.prompt(t, "p1")
	hold := l.askAsync(t, "hold", "", "let go")
	<-l.held
	a := l.activation()

	deactivated := make(chan error, 1)
	go func() {
		_, err := l.rt.Deactivate(testutil.WaitContext(t), Address{Type: "Loop", Owner: "o", Alias: "a"})
		deactivated <- err
	}()
	testutil.WaitFor(t, "a deactivation pending", func() bool { return a.deactivate.Load() != 0 })
	status := l.askAsync(t, "status", "", "activation 2 running=false")
	l.waitQueued(t, 2) // the deactivation, then status

	close(l.release)
	wait(t, "the prompt", first)
	testutil.WaitFor(t, "the deactivation to begin", func() bool {
		_, ok := l.rt.interleaved.Load(a)
		return !ok
	})
	select {
	case r := <-l.ended:
		t.Fatalf("OnDeactivate (%v) ran while an interleaving request was running", r)
	default:
	}
	notYet(t, "Deactivate", deactivated)

	close(l.unhold)
	wait(t, "hold", hold)
	wait(t, "Deactivate", deactivated)
	if r := <-l.ended; r != ReasonRequested {
		t.Fatalf("OnDeactivate(%v), want %v", r, ReasonRequested)
	}
	wait(t, "status, in the next activation", status)
}

// A panic in an interleaving request fails that request (Internal) and
// ends the activation after the turn in progress; requests that come
// meanwhile queue for the next activation.
func TestInterleavePanic(t *testing.T) {
	l := newLoop(t, 0, false)
	first := l.prompt(t, "p1")
	_, err := l.ask(t.Context(), "boom", "")
	wantCode(t, err, codes.Internal, "panicked")
	status := l.askAsync(t, "status", "", "activation 2 ")
	l.waitQueued(t, 2) // the deactivation, then status
	close(l.release)
	wait(t, "the prompt", first)
	wait(t, "status", status)
	if r := <-l.ended; r != ReasonPanic {
		t.Fatalf("OnDeactivate(%v), want %v", r, ReasonPanic)
	}
}

// An interleaving request may ask other agents: its turn holds no lock of
// the activation's, so the turn it runs beside is unaffected.
func TestInterleaveAsksOut(t *testing.T) {
	l := newLoop(t, 0, false)
	first := l.prompt(t, "p1")
	if got, err := l.ask(t.Context(), "relay", "x"); err != nil || got != "via x" {
		t.Fatalf("relay = %q, %v", got, err)
	}
	close(l.release)
	wait(t, "the prompt", first)
	if got, err := l.ask(t.Context(), "peek", ""); err != nil || got != "activation 1 running=false log=turn:p1,end:p1" {
		t.Fatalf("peek = %q, %v", got, err)
	}
}

// A request another silo forwards is not taken into the mailbox
// (tryAskRemote) but run on a goroutine of its own, so that the transport
// handing it over does not wait.
func TestInterleaveForwarded(t *testing.T) {
	l := newLoop(t, 0, false)
	first := l.prompt(t, "p1")
	msg := func() *Message {
		return &Message{ID: NewID(), From: "Client:o:c", To: loopAddr, MessageType: "status"}
	}
	if l.rt.tryAskRemote(t.Context(), msg(), 1, true, func(*agentsilov1.AgentMessage, error) { t.Error("done called") }) {
		t.Fatal("tryAskRemote queued a request for an interleaving skill")
	}
	got := make(chan error, 1)
	l.rt.askRemoteAsync(t.Context(), msg(), 1, func(r *agentsilov1.AgentMessage, err error) {
		if err == nil && r.GetMessage() != "activation 1 running=true log=turn:p1" {
			err = fmt.Errorf("reply %q", r.GetMessage())
		}
		got <- err
	})
	wait(t, "the forwarded status", got)
	close(l.release)
	wait(t, "the prompt", first)
}

// At most the mailbox's size of interleaving requests run at once; more
// queue.
func TestInterleaveBound(t *testing.T) {
	l := newLoop(t, 1, false)
	first := l.prompt(t, "p1")
	hold := l.askAsync(t, "hold", "", "let go")
	<-l.held
	status := l.askAsync(t, "status", "", "activation 1 running=false")
	l.waitQueued(t, 1)
	close(l.unhold)
	wait(t, "hold", hold)
	notYet(t, "status", status)
	close(l.release)
	wait(t, "the prompt", first)
	wait(t, "status", status)
}

// Interleave is a skill's own flag: kept by Info, set by Interleaving on a
// typed skill, and only the named skills interleave.
func TestSkillInterleaving(t *testing.T) {
	sk := TypedSkill[struct{}, any]("conversation", "The record.").Interleaving()
	if !sk.Interleave || sk.Name != "conversation" || len(sk.InputSchema) == 0 {
		t.Fatalf("Interleaving() = %+v", sk)
	}
	reg := NewRegistry()
	if err := reg.Register("T", echoFactory, TypeInfo{Skills: []Skill{sk, {Name: "plain"}}}); err != nil {
		t.Fatal(err)
	}
	info, _ := reg.Info("T")
	if !info.Skills[0].Interleave || info.Skills[1].Interleave {
		t.Fatalf("Info skills %+v", info.Skills)
	}
	e := reg.lookup("T")
	if _, ok := e.interleave["conversation"]; !ok || len(e.interleave) != 1 {
		t.Fatalf("interleaving skills %v", e.interleave)
	}
	if err := reg.Register("U", echoFactory); err != nil || reg.lookup("U").interleave != nil {
		t.Fatalf("a type without interleaving skills: %v, %v", err, reg.lookup("U").interleave)
	}
}

// The guide's example (docs/agents.md, compiled by tests/docs) declares
// its skill interleaving and guards what the skill reads.
func TestInterleaveDocBlock(t *testing.T) {
	block := testutil.DocBlock(t, "docs/agents.md", "agent:interleave")
	for _, want := range []string{".Interleaving()", "sync.Mutex", "w.mu.Lock()"} {
		if !strings.Contains(block, want) {
			t.Errorf("the guide's interleaving example lacks %q", want)
		}
	}
}
