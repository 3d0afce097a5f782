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

	"github.com/agentsilo/agentsilo/audit"
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
//	    contextId and task id in its state, marked StateInbound (on a
//	    turn after input-required, beside the state of the reply that
//	    asked: carriedState)
//	what the agent pushes to that address meanwhile becomes events: a
//	    TypeArtifact push an artifact chunk, any other a working status
//	    update with the push as its message
//	the reply: an artifact and completed; or, by its message type,
//	    input-required, auth-required (then input-required), rejected
//	an error: its code gives rejected, auth-required, canceled or failed
//	    (stateFor), with "<Code>: <message>" as the status message
//
// It never returns an error once the task exists, so that every execution
// ends in a stored state with its reason. A blocking send's new task
// starts on the fast path instead (fastpath.go), which ends it itself or
// hands its turn to an execution here.
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
		// view follows the task as the SDK stores it, for a final snapshot.
		view := &taskView{}
		yield = view.tracking(yield)
		if h := c.send.takeHandover(ec.TaskID); h != nil {
			// The turn the fast path started (see fastpath.go) goes on
			// here, and ends with this execution, as one started here.
			defer context.AfterFunc(ctx, func() { h.run.cancel(context.Cause(ctx)) })()
			if ec.StoredTask != nil {
				// Written (the SDK read it): as stored.
				view.t = copyTask(ec.StoredTask)
			} else if !yield(h.t, nil) {
				h.run.stop()
				return
			}
			e.drive(ec, c, view, h.run, h.pushes, h.ended, yield)
			return
		}
		msg, err := toAgentMessage(ec.Message)
		if err != nil {
			yield(nil, err)
			return
		}
		if ec.StoredTask == nil {
			t := spec.NewSubmittedTask(ec, ec.Message)
			now := time.Now().UTC()
			t.Status = spec.TaskStatus{State: spec.TaskStateWorking, Timestamp: &now}
			if !yield(t, nil) {
				return
			}
		} else {
			view.t = copyTask(ec.StoredTask)
			if !yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateWorking, nil), nil) {
				return
			}
		}
		e.drive(ec, c, view, e.startTurn(ctx, ec, c, msg), nil, false, yield)
	}
}

// contextAgent is the agent that serves agent's context contextID: its
// context's (grain.ContextAddress) if its type keeps each context apart
// (TypeInfo.PerContext), else agent.
func (s *Server) contextAgent(agent grain.Address, contextID string) grain.Address {
	if ti, ok := s.reg.Info(agent.Type); ok && ti.PerContext {
		return grain.ContextAddress(agent, contextID)
	}
	return agent
}

// turnRun is the agent's turn for a task: an Ask through the runtime on
// behalf of the caller, from a fresh inbox address, which runs in a
// goroutine while what the agent pushes to that address waits in the
// inbox. Its owner takes what comes (next) until the turn ends, then
// releases it (stop).
type turnRun struct {
	box     *inbox.Inbox
	tctx    context.Context
	cancel  context.CancelCauseFunc
	done    chan turnResult
	ended   bool // the turn ended: its result is res
	res     turnResult
	st      streamState
	release func()

	// The turn's audit record, which the turn's goroutine appends when
	// the turn ends, unless held (the fast path: the record is written
	// with the task's end, see fastpath.go); then it keeps it in held.
	recMu sync.Mutex
	hold  bool
	held  *audit.Record
}

type turnResult struct {
	reply *grain.Message
	err   error
}

// startTurn starts the turn that asks the call's agent msg.
func (e *executor) startTurn(ctx context.Context, ec *a2asrv.ExecutorContext, c *call, msg *grain.Message) *turnRun {
	return e.startTurnHolding(ctx, ec, c, msg, false)
}

// startTurnHolding starts the turn as startTurn does; if hold, its audit
// record is kept for the caller (turnRun.takeRecord) instead of appended.
func (e *executor) startTurnHolding(ctx context.Context, ec *a2asrv.ExecutorContext, c *call, msg *grain.Message, hold bool) *turnRun {
	box := e.s.inboxes.Open(c.caller.Principal, inbox.A2A)
	msg.To = e.s.contextAgent(c.agent, ec.ContextID).String()
	msg.From = box.Addr()
	msg.OnBehalfOf = c.caller.Principal // the principal of the call chain (see grain.Authorizer)
	msg.Kind = grain.KindRequest
	// The task's ids (and the state the agent's reply that asked for
	// input carried, on the next turn), marked as this server's.
	msg.State = carriedState(ec.StoredTask)
	if msg.State == nil {
		msg.State = make(map[string]string, 3)
	}
	msg.State[StateContextID], msg.State[StateTaskID], msg.State[StateInbound] = ec.ContextID, string(ec.TaskID), "true"
	if msg.To != c.agent.String() {
		msg.State[grain.StateContext] = ec.ContextID
	}

	tctx, cancel := context.WithCancelCause(ctx)
	tctx, stop := context.WithTimeout(tctx, e.s.cfg.TaskTimeout)
	if c.traceparent != "" {
		tctx = grain.WithTraceparent(tctx, c.traceparent)
	}
	remove := e.s.turns.add(ec.TaskID, cancel)
	r := &turnRun{box: box, tctx: tctx, cancel: cancel, done: make(chan turnResult, 1), hold: hold}
	r.release = func() {
		remove()
		stop()
		cancel(nil)
		e.s.inboxes.Close(box)
	}
	go func() {
		reply, err := e.s.rt.Ask(tctx, msg)
		if rec := e.s.record(ec, c, msg, reply, err); rec != nil {
			r.recMu.Lock()
			if r.hold {
				r.held = rec
			} else {
				e.s.appendRecord(tctx, ec, *rec)
			}
			r.recMu.Unlock()
		}
		r.done <- turnResult{reply, err}
	}()
	return r
}

// takeRecord stops holding the turn's record and returns it, if the turn
// ended; if it has not, the turn appends it when it ends.
func (r *turnRun) takeRecord() *audit.Record {
	r.recMu.Lock()
	defer r.recMu.Unlock()
	r.hold = false
	rec := r.held
	r.held = nil
	return rec
}

// record returns the audit record of the turn of task ec, keyed by the
// task and its message: one record per turn served, whatever its outcome
// (nil if the audit is off).
func (s *Server) record(ec *a2asrv.ExecutorContext, c *call, msg, reply *grain.Message, err error) *audit.Record {
	if !s.audit.Enabled() {
		return nil
	}
	mid := ""
	if ec.Message != nil {
		mid = ec.Message.ID
	}
	r := audit.Record{
		Key:         "a2a/" + string(ec.TaskID) + "/" + mid,
		Kind:        audit.KindA2ATask,
		Principal:   c.caller.Principal,
		OnBehalfOf:  []string{c.caller.Principal},
		Agent:       msg.To,
		Skill:       msg.MessageType,
		Task:        string(ec.TaskID),
		Correlation: ec.ContextID,
		Trigger:     "a2a",
		Outcome:     audit.OutcomeOK,
	}
	if err != nil {
		r.Outcome, r.Detail = audit.OutcomeError, errs.Code(err).String()+": "+err.Error()
	} else if t := reply.MessageType; t != "" {
		r.Detail = t
	}
	return &r
}

// appendRecord appends r, the record of a turn of task ec, in the
// background, the task's answer not waiting for it; a record that cannot
// be written is logged, the turn's outcome stands.
func (s *Server) appendRecord(ctx context.Context, ec *a2asrv.ExecutorContext, r audit.Record) {
	s.audit.Go(ctx, r, func(aerr error) {
		s.logger.Error("audit: an A2A task's turn is not recorded", "task", ec.TaskID, "err", aerr)
	})
}

// next waits for the agent's pushes or the turn's end, and returns the
// pushes taken and whether the turn ended (its result is then r.res).
func (r *turnRun) next() ([]*grain.Message, bool) {
	select {
	case <-r.box.Signal():
		return r.box.Take(), false
	case r.res = <-r.done:
		r.ended = true
		return r.box.Take(), true
	}
}

// stop ends the turn, if it runs, once its events are no longer taken,
// and releases it.
func (r *turnRun) stop() {
	if !r.ended {
		r.cancel(errStopped)
		r.res, r.ended = <-r.done, true
	}
	r.release()
}

// drive yields the events of turn r, from the pushes already taken (and
// its end, if ended) on, and releases it.
func (e *executor) drive(ec *a2asrv.ExecutorContext, c *call, view *taskView, r *turnRun, pushes []*grain.Message, ended bool, yield func(spec.Event, error) bool) {
	for {
		for _, p := range pushes {
			if !yield(r.st.event(ec, p), nil) {
				r.stop()
				return
			}
		}
		if ended {
			defer r.release()
			e.finish(r.tctx, ec, c, view, r.res.reply, r.res.err, yield)
			return
		}
		pushes, ended = r.next()
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
	switch reply.MessageType {
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
		ev := replyArtifact(ec, reply)
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

// replyArtifact is the artifact event of a reply that completes a task.
func replyArtifact(ec *a2asrv.ExecutorContext, reply *grain.Message) *spec.TaskArtifactUpdateEvent {
	ev := spec.NewArtifactEvent(ec, toParts(reply)...)
	ev.Artifact.Name = "reply"
	ev.Artifact.Metadata = stateMap(reply)
	ev.LastChunk = true
	return ev
}

// completes reports whether reply completes its task (see finish).
func completes(reply *grain.Message) bool {
	switch reply.MessageType {
	case TypeInputRequired, TypeAuthRequired, TypeRejected:
		return false
	}
	return true
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
	if p.MessageType != TypeArtifact {
		m := spec.NewMessageForTask(spec.MessageRoleAgent, ec, toParts(p)...)
		m.Metadata = stateMap(p)
		return spec.NewStatusUpdateEvent(ec, spec.TaskStateWorking, m)
	}
	if st.artifacts == nil {
		st.artifacts = make(map[string]spec.ArtifactID)
	}
	name := p.State[StateArtifactID]
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
