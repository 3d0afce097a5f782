package transport

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// TestTransportCancel: a caller whose ctx is cancelled while its request
// runs on the peer ends the handler's ctx there (Canceled, and the contexts
// derived from it), with or without a deadline; a deadline still ends it
// with DeadlineExceeded; a notice for an unknown call changes nothing.
func TestTransportCancel(t *testing.T) {
	checkLeaks(t)
	type ended struct {
		err, derived, after error
	}
	started := make(chan struct{}, 1)
	endc := make(chan ended, 1)
	hb := &testHandler{request: func(ctx context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		if env.Message.Message != "block" {
			r := env.Message.Response()
			r.Message = "echo:" + env.Message.Message
			return r, nil
		}
		// A context derived from the handler's, and an AfterFunc on it,
		// follow it.
		derived, cancel := context.WithCancel(ctx)
		defer cancel()
		afterc := make(chan error, 1)
		stop := context.AfterFunc(ctx, func() { afterc <- ctx.Err() })
		defer stop()
		started <- struct{}{}
		<-derived.Done()
		endc <- ended{err: ctx.Err(), derived: derived.Err(), after: <-afterc}
		return nil, ctx.Err()
	}}
	a := startSilo(t, "a", "127.0.0.1:0", nil, nil, nil)
	b := startSilo(t, "b", "127.0.0.2:0", hb, nil, nil)

	cancelWhileRunning := func(parent context.Context) ended {
		t.Helper()
		ctx, cancel := context.WithCancel(parent)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := a.tr.Ask(ctx, b.addr, requestEnv("block"))
			errc <- err
		}()
		<-started
		cancel()
		wantCode(t, <-errc, codes.Canceled)
		return <-endc
	}
	withDeadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for name, parent := range map[string]context.Context{"deadline": withDeadline, "no deadline": context.Background()} {
		e := cancelWhileRunning(parent)
		if !errors.Is(e.err, context.Canceled) || !errors.Is(e.derived, context.Canceled) || !errors.Is(e.after, context.Canceled) {
			t.Fatalf("%s: the handler's ctx ended with %v (derived %v, AfterFunc %v), want Canceled", name, e.err, e.derived, e.after)
		}
	}

	// A deadline ends the handler's ctx with DeadlineExceeded, and sends no
	// notice.
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err := a.tr.Ask(short, b.addr, requestEnv("block"))
	<-started
	wantCode(t, err, codes.DeadlineExceeded)
	if e := <-endc; !errors.Is(e.err, context.DeadlineExceeded) || !errors.Is(e.derived, context.DeadlineExceeded) {
		t.Fatalf("at its deadline the handler's ctx ended with %v (derived %v), want DeadlineExceeded", e.err, e.derived)
	}

	// Notices for calls the peer does not know, or has answered, are
	// ignored, and the stream goes on.
	ctx := context.Background()
	if _, err := a.tr.Ask(ctx, b.addr, requestEnv("x")); err != nil {
		t.Fatal(err)
	}
	p, err := a.tr.peer(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{0, p.nextID.Load(), p.nextID.Load() + 1000} {
		p.sendCancel(id)
	}
	if r, err := a.tr.Ask(ctx, b.addr, requestEnv("y")); err != nil || r.Message != "echo:y" {
		t.Fatalf("after stray notices: %v, %v", r, err)
	}

	// A stream that breaks cancels the calls without a deadline it carried
	// (nothing else would end them); one with a deadline runs on, until the
	// transport closes.
	var ctxs []context.Context
	hb.request = func(ctx context.Context, _ string, env *Envelope) (*agentsilov1.AgentMessage, error) {
		ctxs = append(ctxs, ctx) // one at a time: the test waits for started
		started <- struct{}{}
		<-ctx.Done()
		endc <- ended{err: ctx.Err()}
		return nil, ctx.Err()
	}
	errc := make(chan error, 2)
	for _, ctx := range []context.Context{withDeadline, context.Background()} {
		go func() {
			_, err := a.tr.Ask(ctx, b.addr, requestEnv("block"))
			errc <- err
		}()
		<-started
	}
	a.tr.ClosePeer(b.addr)
	wantCode(t, <-errc, codes.Unavailable)
	wantCode(t, <-errc, codes.Unavailable)
	if e := <-endc; !errors.Is(e.err, context.Canceled) {
		t.Fatalf("after the stream broke the handler's ctx ended with %v, want Canceled", e.err)
	}
	if !errors.Is(ctxs[1].Err(), context.Canceled) || ctxs[0].Err() != nil {
		t.Fatalf("after the stream broke: with a deadline %v, without %v; want nil, Canceled", ctxs[0].Err(), ctxs[1].Err())
	}
	b.tr.Close()
	if e := <-endc; !errors.Is(e.err, context.Canceled) {
		t.Fatalf("when the transport closed, the handler's ctx ended with %v, want Canceled", e.err)
	}
}

// TestCalls checks the table of an inbound stream's calls: it holds only
// the calls being handled, deadlines end calls by tick, and closing cancels
// what is left.
func TestCalls(t *testing.T) {
	checkLeaks(t)
	var cs calls
	cs.values = context.Background()
	soon := time.Now().Add(30 * time.Millisecond).UnixMilli()
	later := time.Now().Add(time.Hour).UnixMilli()
	var cc []*callCtx
	for i := range 6 {
		dl := later
		switch i % 3 {
		case 0:
			dl = soon
		case 1:
			dl = 0
		}
		c := cs.add(&Envelope{CallId: uint64(i + 1), DeadlineUnixMs: dl})
		if c == nil {
			t.Fatalf("call %d: nil context", i+1)
		}
		cc = append(cc, c)
	}
	if c := cs.add(&Envelope{CallId: 99, DeadlineUnixMs: time.Now().Add(-time.Second).UnixMilli()}); c != nil {
		t.Fatal("a request past its deadline got a context")
	}
	if n := cs.inFlight(); n != 6 {
		t.Fatalf("%d calls in flight, want 6", n)
	}
	// Answered calls leave the table. Their tick, emptied, is kept as the
	// spare, with its timer, for the next call due in it.
	cs.remove(cc[2])
	cs.remove(cc[5])
	cs.mu.Lock()
	ticks, spare := len(cs.ticks), cs.ticks[cs.spare]
	cs.mu.Unlock()
	if n := cs.inFlight(); n != 4 || ticks != 2 || spare == nil || len(spare.calls) != 0 {
		t.Fatalf("%d calls in flight and %d ticks (spare %v), want 4 and 2 (one spare)", n, ticks, spare)
	}
	again := cs.add(&Envelope{CallId: 50, DeadlineUnixMs: later})
	cs.mu.Lock()
	reused, sp := cs.ticks[again.tick] == spare, cs.spare
	cs.mu.Unlock()
	if !reused || sp != 0 {
		t.Fatalf("a call due in the spare tick: reused %t, spare %d", reused, sp)
	}
	cs.remove(again)
	// A spare goes when another tick empties.
	other := cs.add(&Envelope{CallId: 51, DeadlineUnixMs: later + 1000})
	otherTick := other.tick
	cs.remove(other)
	cs.mu.Lock()
	ticks, sp = len(cs.ticks), cs.spare
	cs.mu.Unlock()
	if ticks != 2 || sp != otherTick {
		t.Fatalf("after another tick emptied: %d ticks, spare %d, want 2 and %d", ticks, sp, otherTick)
	}
	// The deadline ends the calls due.
	<-cc[0].Done()
	<-cc[3].Done()
	if !errors.Is(cc[0].Err(), context.DeadlineExceeded) || cc[1].Err() != nil {
		t.Fatalf("after the deadline: %v, %v", cc[0].Err(), cc[1].Err())
	}
	if dl, ok := cc[0].Deadline(); !ok || dl.UnixMilli() != soon {
		t.Fatalf("Deadline() = %v, %v", dl, ok)
	}
	// A notice cancels one call; an unknown id nothing.
	cs.cancel(2)
	cs.cancel(1000)
	if !errors.Is(cc[1].Err(), context.Canceled) || cc[4].Err() != nil {
		t.Fatalf("after a notice: %v, %v", cc[1].Err(), cc[4].Err())
	}
	// Done is made when first asked for: asked after the end, it is closed;
	// asked before, it is the channel that the end closes.
	select {
	case <-cc[1].Done():
	default:
		t.Fatal("the Done of a call cancelled before anyone asked is not closed")
	}
	x := cs.add(&Envelope{CallId: 10, DeadlineUnixMs: later})
	d := x.Done()
	if d != x.Done() {
		t.Fatal("Done returned two channels")
	}
	cs.cancel(10)
	<-d
	cs.remove(x)
	// A deadline past the year 2262 is accepted and does not end the call.
	if c := cs.add(&Envelope{CallId: 9, DeadlineUnixMs: math.MaxInt64}); c == nil || c.Err() != nil {
		t.Fatal("a request with a deadline in the far future was refused")
	} else {
		cs.remove(c)
	}
	// A stopped AfterFunc does not run. Closing (the stream ended) cancels
	// the calls without a deadline; those with one run on until the
	// transport closes, and a call added after starts cancelled.
	ran := make(chan struct{}, 1)
	stop := cc[4].AfterFunc(func() { ran <- struct{}{} })
	if !stop() {
		t.Fatal("stop of a pending AfterFunc returned false")
	}
	running := cs.add(&Envelope{CallId: 8, DeadlineUnixMs: later})
	transport, closeTransport := context.WithCancel(context.Background())
	defer closeTransport()
	cs.close(transport)
	if !errors.Is(cc[4].Err(), context.Canceled) {
		t.Fatalf("a call without a deadline after close: %v", cc[4].Err())
	}
	select {
	case <-ran:
		t.Fatal("a stopped AfterFunc ran")
	default:
	}
	if c := cs.add(&Envelope{CallId: 7}); c == nil || !errors.Is(c.Err(), context.Canceled) {
		t.Fatal("a call added after close is not cancelled")
	}
	if n := cs.inFlight(); n != 0 {
		t.Fatalf("%d calls in flight after close", n)
	}
	if running.Err() != nil || cc[2].Err() != nil {
		t.Fatalf("after close, a call with a deadline: %v; an answered one: %v", running.Err(), cc[2].Err())
	}
	closeTransport()
	<-running.Done()
	if !errors.Is(running.Err(), context.Canceled) || cc[2].Err() != nil {
		t.Fatalf("when the transport closed: %v, %v", running.Err(), cc[2].Err())
	}
	cs.mu.Lock()
	ticks = len(cs.ticks)
	cs.mu.Unlock()
	if ticks != 0 {
		t.Fatalf("%d ticks left after the transport closed", ticks)
	}
}
