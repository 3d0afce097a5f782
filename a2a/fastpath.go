package a2a

import (
	"context"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/workqueue"

	"github.com/agentsilo/agentsilo/grain"
)

// The fast path of a blocking send. A SendMessage that makes a new task
// and waits for its result only (no returnImmediately, no push config:
// sendState.fast) is run by the work queue (work.run) before the SDK's
// execution sees it:
//
//   - the working task is queued for writing (group commit) and the turn
//     starts at once, as on the SDK's path (where the turn starts when the
//     SDK has the task, not once it is written);
//   - if the turn ends with a reply that completes the task, before the
//     agent pushed anything and while the working task still waits to be
//     sent, that write is taken back and the completed task is the task's
//     one write: no one can have seen the task by then (its caller learns
//     its id from the result; without a write there is nothing to list,
//     get, subscribe to, cancel or attach a push config to). The result is
//     handed to the send's subscription (the local event queue) once
//     written, with its version;
//   - else (a push, another ending, or the working task written: then it
//     may have been seen), the turn, still running or ended, is handed
//     over to the SDK's execution (handover), which the executor resumes
//     where the fast path left it, from the task as written, if it was.
//
// What this saves is the SDK's processing of each event, whose deep
// copies of the task (through encoding/gob, four per task) were a fifth of
// a task's CPU, and, under load, the working task's write.

// handover is a turn the fast path leaves to the SDK's execution, once
// the working task's write is settled (taken back, or done), so that the
// SDK's read of the task finds it if it was written: the executor then
// goes on from the task as stored, else it yields t, which the SDK
// creates.
type handover struct {
	run    *turnRun
	t      *spec.Task       // the working task
	pushes []*grain.Message // taken from the turn, not yet yielded
	ended  bool             // the turn ended (run.res)
}

// lean runs p, the execution of a blocking send's new task, on the fast
// path, and reports whether it ended the execution, with the error of the
// task's write if that failed; if not, the SDK's execution takes the turn
// over (see above).
func (e *executor) lean(ctx context.Context, p *workqueue.Payload) (bool, error) {
	c := callFrom(ctx)
	m := p.ExecuteRequest.Message
	msg, err := toAgentMessage(m)
	if c == nil || err != nil {
		return false, nil // the SDK's execution reports it
	}
	if m.ContextID == "" {
		// The task's context, made here rather than by the SDK: a turn
		// it takes over has been told it.
		m.ContextID = spec.NewContextID()
	}
	ec := &a2asrv.ExecutorContext{Message: m, TaskID: p.TaskID, ContextID: m.ContextID, Metadata: p.ExecuteRequest.Metadata}
	t := spec.NewSubmittedTask(ec, m)
	now := time.Now().UTC()
	t.Status = spec.TaskStatus{State: spec.TaskStateWorking, Timestamp: &now}
	pend, err := e.s.store.createAsync(ctx, t)
	if err != nil {
		return false, nil
	}
	r := e.startTurnHolding(ctx, ec, c, msg, true)
	pushes, ended := r.next()
	if ended && len(pushes) == 0 && r.res.err == nil && completes(r.res.reply) && pend.withdraw() {
		r.release()
		view := &taskView{t: copyTask(t)}
		view.apply(replyArtifact(ec, r.res.reply))
		view.apply(spec.NewStatusUpdateEvent(ec, spec.TaskStateCompleted, nil))
		// The turn's audit record goes in the task's one write, so that
		// the completed task and its record are written together.
		rec := r.takeRecord()
		staged := e.s.stage(ctx, rec)
		v, err := e.s.store.createWith(ctx, view.t, staged)
		if rec != nil && (staged == nil || !staged.written) {
			e.s.appendRecord(ctx, ec, *rec) // its key: written at most once
		}
		if err != nil {
			return true, err
		}
		e.s.queues.publish(p.TaskID, view.t, v)
		return true, nil
	}
	if rec := r.takeRecord(); rec != nil {
		e.s.appendRecord(ctx, ec, *rec)
	}
	if !pend.withdraw() {
		pend.wait() // a failed write: the SDK's read tells
	}
	c.send.setHandover(p.TaskID, &handover{run: r, t: t, pushes: pushes, ended: ended})
	return false, nil
}
