package a2a

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/inbox"
)

// The causes a turn's context is cancelled with.
var (
	errCancelRequested = errors.New("a2a: the task was canceled")
	errShutdown        = errors.New("a2a: the silo is shutting down")
	errStopped         = errors.New("a2a: the execution stopped taking events")
)

// executor is the SDK's AgentExecutor: one execution is one turn of the
// agent at the endpoint (the call's agent), an Ask through the runtime on
// behalf of the caller:
//
//	the task is stored working (created, or resumed from input-required)
//	the message is asked of the agent, from a fresh inbox address of the
//	    caller's principal (Session:<principal>:a2a-<id>@<silo>), with the
//	    contextId and task id in its state
//	what the agent pushes to that address meanwhile becomes events: a
//	    TypeArtifact push an artifact chunk, any other a working status
//	    update with the push as its message
//	the reply: an artifact and completed; or, by its message type,
//	    input-required, auth-required (then input-required), rejected
//	an error: its code gives rejected, auth-required, canceled or failed
//	    (stateFor), with "<Code>: <message>" as the status message
//
// It never returns an error once the task exists, so that every execution
// ends in a stored state with its reason.
type executor struct{ s *Server }

var _ a2asrv.AgentExecutor = (*executor)(nil)

// Execute implements a2asrv.AgentExecutor.
func (e *executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		c := callFrom(ctx)
		if c == nil {
			yield(nil, spec.ErrUnauthenticated)
			return
		}
		msg, err := toAgentMessage(ec.Message)
		if err != nil {
			yield(nil, err)
			return
		}
		// view follows the task as the SDK stores it, for a final snapshot.
		view := &taskView{}
		yield = view.tracking(yield)
		if ec.StoredTask == nil {
			t := spec.NewSubmittedTask(ec, ec.Message)
			now := time.Now().UTC()
			t.Status = spec.TaskStatus{State: spec.TaskStateWorking, Timestamp: &now}
			if c.send.fastFor(ec.TaskID) {
				p, err := e.s.store.createAsync(ctx, t)
				if err != nil {
					yield(nil, err)
					return
				}
				f := &fastStart{p: p, t: t, send: &c.send}
				defer f.settle()
				view.t = copyTask(t)
				yield = f.wrap(yield)
			} else if !yield(t, nil) {
				return
			}
		} else {
			view.t = copyTask(ec.StoredTask)
			if !yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateWorking, nil), nil) {
				return
			}
		}
		e.turn(ctx, ec, c, msg, view, yield)
	}
}

// fastStart is the start of a blocking send's new task on the fast path
// (see sendState.fast): the executor writes the working task itself,
// through the group commit, while the turn runs, instead of yielding it to
// the SDK first, and takes that write back if the turn ends while it still
// waits to be sent: the task's one write is then its end. The SDK learns
// of the task with the first event the turn yields (wrap): a whole task
// (the blocking send's final snapshot) as its first write, which is an
// update of the executor's write if that was made (sendState.own); any
// other event after the working task. The working task is stored while
// the turn runs, as on the SDK's path (where the turn starts as soon as
// the SDK has the event, not once it is written), unless the turn ends
// before it could be: no one can have seen the task by then (a blocking
// send's caller learns its id from the result, no push config is set).
type fastStart struct {
	p        *pendingCreate
	t        *spec.Task // the working task
	send     *sendState
	resolved bool
}

// wrap wraps yield so that the first event settles the working task's
// write first.
func (f *fastStart) wrap(yield func(spec.Event, error) bool) func(spec.Event, error) bool {
	return func(ev spec.Event, err error) bool {
		if f.resolved || err != nil {
			return yield(ev, err)
		}
		f.resolved = true
		if !f.p.withdraw() {
			rev, err := f.p.wait()
			if err != nil {
				return yield(nil, err)
			}
			f.send.setOwn(f.t.ID, rev)
		}
		if _, whole := ev.(*spec.Task); whole {
			return yield(ev, nil)
		}
		return yield(f.t, nil) && yield(ev, nil)
	}
}

// settle waits for the working task's write if no event settled it.
func (f *fastStart) settle() {
	if !f.resolved {
		f.p.wait()
	}
}

// turn asks the agent and yields what comes of it.
func (e *executor) turn(ctx context.Context, ec *a2asrv.ExecutorContext, c *call, msg *grain.Message, view *taskView, yield func(spec.Event, error) bool) {
	box := e.s.inboxes.Open(c.caller.Principal, inbox.A2A)
	defer e.s.inboxes.Close(box)
	msg.To = c.agent.String()
	msg.From = box.Addr()
	msg.OnBehalfOf = c.caller.Principal // the principal of the call chain (see grain.Authorizer)
	msg.Kind = grain.KindRequest
	msg.Traceparent = c.traceparent
	msg.State = map[string]string{StateContextID: ec.ContextID, StateTaskID: string(ec.TaskID)}

	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, stop := context.WithTimeout(tctx, e.s.cfg.TaskTimeout)
	defer stop()
	defer e.s.turns.add(ec.TaskID, cancel)()

	type result struct {
		reply *grain.Message
		err   error
	}
	done := make(chan result, 1)
	go func() {
		r, err := e.s.rt.Ask(tctx, msg)
		done <- result{r, err}
	}()
	st := &streamState{}
	pushes := func() bool {
		for _, p := range box.Take() {
			if !yield(st.event(ec, p), nil) {
				return false
			}
		}
		return true
	}
	for {
		select {
		case <-box.Signal():
			if !pushes() {
				cancel(errStopped)
				<-done
				return
			}
		case r := <-done:
			if pushes() {
				e.finish(tctx, ec, c, view, r.reply, r.err, yield)
			}
			return
		}
	}
}

// finish yields the events that end a turn.
func (e *executor) finish(tctx context.Context, ec *a2asrv.ExecutorContext, c *call, view *taskView, reply *grain.Message, err error, yield func(spec.Event, error) bool) {
	status := func(s spec.TaskState, m *spec.Message) bool {
		return yield(spec.NewStatusUpdateEvent(ec, s, m), nil)
	}
	agentMsg := func(r *grain.Message) *spec.Message {
		m := spec.NewMessageForTask(spec.MessageRoleAgent, ec, toParts(r)...)
		m.Metadata = stateMap(r)
		return m
	}
	if err != nil {
		cause := context.Cause(tctx)
		switch {
		case errors.Is(cause, errCancelRequested):
			status(spec.TaskStateCanceled, nil)
		case errors.Is(cause, errShutdown):
			status(spec.TaskStateFailed, errorMessage(ec, errs.New(codes.Unavailable, "silo %s shut down during the turn", e.s.cfg.Silo)))
		case errors.Is(cause, context.DeadlineExceeded) && errs.Code(err) == codes.DeadlineExceeded:
			status(spec.TaskStateFailed, errorMessage(ec, errs.New(codes.DeadlineExceeded, "the turn took longer than the task timeout, %v", e.s.cfg.TaskTimeout)))
		default:
			m := errorMessage(ec, err)
			switch st := stateFor(errs.Code(err)); st {
			case spec.TaskStateAuthRequired:
				if status(spec.TaskStateAuthRequired, m) {
					status(spec.TaskStateInputRequired, m)
				}
			default:
				status(st, m)
			}
		}
		return
	}
	switch reply.GetMessageType() {
	case TypeInputRequired:
		status(spec.TaskStateInputRequired, agentMsg(reply))
	case TypeAuthRequired:
		m := agentMsg(reply)
		if status(spec.TaskStateAuthRequired, m) {
			status(spec.TaskStateInputRequired, m)
		}
	case TypeRejected:
		status(spec.TaskStateRejected, agentMsg(reply))
	default:
		ev := spec.NewArtifactEvent(ec, toParts(reply)...)
		ev.Artifact.Name = "reply"
		ev.Artifact.Metadata = stateMap(reply)
		ev.LastChunk = true
		if c.blocking && view.t != nil {
			// Nobody streams: the artifact and the final state in one
			// write, the task as the SDK would have stored it after both.
			view.apply(ev)
			view.apply(spec.NewStatusUpdateEvent(ec, spec.TaskStateCompleted, nil))
			yield(view.t, nil)
			return
		}
		if yield(ev, nil) {
			status(spec.TaskStateCompleted, nil)
		}
	}
}

// taskView is a task as the SDK's task store holds it after the events an
// execution yielded, kept by applying them as the SDK does (its
// taskupdate rules: a status replaces the status, whose message moves to
// the history, and merges its metadata; an artifact event adds the
// artifact or, appending, its parts).
type taskView struct{ t *spec.Task }

// tracking wraps yield so that the view follows what is yielded.
func (v *taskView) tracking(yield func(spec.Event, error) bool) func(spec.Event, error) bool {
	return func(ev spec.Event, err error) bool {
		if err == nil {
			v.apply(ev)
		}
		return yield(ev, err)
	}
}

func (v *taskView) apply(ev spec.Event) {
	switch e := ev.(type) {
	case *spec.Task:
		v.t = copyTask(e)
	case *spec.TaskStatusUpdateEvent:
		if v.t == nil {
			return
		}
		if v.t.Status.Message != nil {
			v.t.History = append(v.t.History, v.t.Status.Message)
		}
		if e.Metadata != nil {
			if v.t.Metadata == nil {
				v.t.Metadata = make(map[string]any)
			}
			for k, val := range e.Metadata {
				v.t.Metadata[k] = val
			}
		}
		v.t.Status = e.Status
	case *spec.TaskArtifactUpdateEvent:
		if v.t == nil || e.Artifact == nil {
			return
		}
		for _, a := range v.t.Artifacts {
			if a.ID == e.Artifact.ID {
				if e.Append {
					a.Parts = append(slices.Clone(a.Parts), e.Artifact.Parts...)
					for k, val := range e.Artifact.Metadata {
						if a.Metadata == nil {
							a.Metadata = make(map[string]any)
						}
						a.Metadata[k] = val
					}
				} else {
					*a = *e.Artifact
				}
				return
			}
		}
		a := *e.Artifact
		v.t.Artifacts = append(v.t.Artifacts, &a)
	}
}

// copyTask copies what the view changes of a task: its slices and maps of
// its own.
func copyTask(t *spec.Task) *spec.Task {
	c := *t
	c.History = slices.Clone(t.History)
	c.Artifacts = make([]*spec.Artifact, len(t.Artifacts))
	for i, a := range t.Artifacts {
		ac := *a
		c.Artifacts[i] = &ac
	}
	c.Metadata = maps.Clone(t.Metadata)
	return &c
}

// streamState tracks the artifacts a turn streams.
type streamState struct {
	artifacts map[string]spec.ArtifactID // by StateArtifactID ("" for the default)
}

// event is the event of a push p: an artifact chunk for TypeArtifact (the
// first chunk of an artifact makes it, the next ones append), else a
// working status update whose message is p.
func (st *streamState) event(ec *a2asrv.ExecutorContext, p *grain.Message) spec.Event {
	if p.GetMessageType() != TypeArtifact {
		m := spec.NewMessageForTask(spec.MessageRoleAgent, ec, toParts(p)...)
		m.Metadata = stateMap(p)
		return spec.NewStatusUpdateEvent(ec, spec.TaskStateWorking, m)
	}
	if st.artifacts == nil {
		st.artifacts = make(map[string]spec.ArtifactID)
	}
	name := p.GetState()[StateArtifactID]
	if id, ok := st.artifacts[name]; ok {
		return spec.NewArtifactUpdateEvent(ec, id, toParts(p)...)
	}
	ev := spec.NewArtifactEvent(ec, toParts(p)...)
	ev.Artifact.Name = name
	st.artifacts[name] = ev.Artifact.ID
	return ev
}

// Cancel implements a2asrv.AgentExecutor: the running turn, on whichever
// silo, is cancelled (its context, with errCancelRequested), and the task
// is canceled.
func (e *executor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		e.s.cancelTurn(ctx, ec.TaskID)
		var m *spec.Message
		if c := callFrom(ctx); c != nil {
			m = spec.NewMessageForTask(spec.MessageRoleAgent, ec, spec.NewTextPart(fmt.Sprintf("canceled by %s", c.caller.Principal)))
		}
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCanceled, m), nil)
	}
}

// turns are the turns running on this silo, by task, for Cancel.
type turns struct {
	mu sync.Mutex
	m  map[spec.TaskID]context.CancelCauseFunc
}

// add registers a running turn; the func returned removes it.
func (t *turns) add(id spec.TaskID, cancel context.CancelCauseFunc) func() {
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[spec.TaskID]context.CancelCauseFunc)
	}
	t.m[id] = cancel
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.m, id)
		t.mu.Unlock()
	}
}

// cancel cancels the turn of id with cause, and reports whether one ran.
func (t *turns) cancel(id spec.TaskID, cause error) bool {
	t.mu.Lock()
	f := t.m[id]
	t.mu.Unlock()
	if f != nil {
		f(cause)
	}
	return f != nil
}

// all cancels every turn with cause.
func (t *turns) all(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.m {
		f(cause)
	}
}
