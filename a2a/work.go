package a2a

import (
	"context"
	"errors"
	"fmt"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	"github.com/a2aproject/a2a-go/v2/a2asrv/workqueue"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// work is the writer of the SDK's work queue (a push queue, in the SDK's
// cluster mode): an execution or a cancel runs at once, on the silo that
// took the request. The agent itself may live on any silo (the runtime's
// Ask goes there); what is shared between silos is the task store, the
// event stream through it, and the markers and cancel keys of ctl.go.
type work struct {
	s       *Server
	handler workqueue.HandlerFn
}

// Write implements workqueue.Writer: it starts the work and returns.
func (w *work) Write(ctx context.Context, p *workqueue.Payload) (spec.TaskID, error) {
	s := w.s
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return "", spec.NewError(spec.ErrInternalError, "silo "+s.cfg.Silo+" is shutting down: send the message to another")
	}
	s.running.Add(1)
	s.mu.Unlock()
	if p.Type == workqueue.PayloadTypeExecute && p.ExecuteRequest != nil && p.ExecuteRequest.Message != nil && p.ExecuteRequest.Message.TaskID == "" {
		// A new task, its id just made by the SDK (see sendState); a
		// blocking send that wants its result only may take the
		// executor's fast path.
		if c := callFrom(ctx); c != nil {
			cfg := p.ExecuteRequest.Config
			c.send.markFresh(p.TaskID, c.blocking && (cfg == nil || !cfg.ReturnImmediately && cfg.PushConfig == nil))
		}
	}
	// The work outlives the request (a client that goes away does not
	// cancel the turn); Close cuts it short as a last resort.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(s.hard, cancel)
	go func() {
		defer s.running.Done()
		defer cancel()
		defer stop()
		w.run(hctx, p)
	}()
	return p.TaskID, nil
}

// run runs the work and, for an execution, makes sure its requests on this
// silo see it end (settle).
func (w *work) run(ctx context.Context, p *workqueue.Payload) {
	// Hold the task's local event log open until settled.
	hold, _ := w.s.queues.CreateWriter(ctx, p.TaskID)
	defer hold.Close()
	if p.Type == workqueue.PayloadTypeExecute && sendOf(ctx).fastFor(p.TaskID) {
		if done, err := (&executor{s: w.s}).lean(ctx, p); done {
			if err != nil {
				w.settle(context.WithoutCancel(ctx), p.TaskID, nil, err)
			}
			return
		}
	}
	res, err := w.handler(ctx, p)
	if h := sendOf(ctx).takeHandover(p.TaskID); h != nil {
		// The SDK's execution ended before it took the turn over (it
		// could not set up): end the turn.
		h.run.stop()
	}
	if p.Type == workqueue.PayloadTypeExecute {
		w.settle(context.WithoutCancel(ctx), p.TaskID, res, err)
	} else if err != nil {
		w.s.logger.Debug("a2a: cancel", "task", p.TaskID, "err", err)
	}
}

// settle ends what the SDK left open when an execution returned: its
// local readers wait for a final event, which the SDK does not write to
// the queue when it ends on an error it recorded (or failed to record) in
// the store, and a task left in an active state would wait for a reaper.
func (w *work) settle(ctx context.Context, id spec.TaskID, res spec.SendMessageResult, err error) {
	q := w.s.queues
	q.mu.Lock()
	b := q.brokers[id]
	q.mu.Unlock()
	if b != nil && b.sawFinal() {
		return
	}
	if err == nil && res != nil && isFinal(res) {
		q.publish(id, res, taskstore.TaskVersionMissing)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, gerr := w.s.store.Get(ctx, id)
	switch {
	case errors.Is(gerr, spec.ErrTaskNotFound):
		// It ended before there was a task: the request gets the error.
		if err == nil {
			err = spec.NewError(spec.ErrInternalError, "the execution ended without a task")
		}
		q.fail(id, err)
		return
	case gerr != nil:
		q.fail(id, gerr)
		return
	}
	if activeState(st.Task.Status.State) {
		reason := "Internal: the execution ended without a result"
		if err != nil {
			reason = fmt.Sprintf("%s: the execution ended: %v", errs.Code(err), err)
			if errors.Is(err, context.Canceled) {
				reason = fmt.Sprintf("%s: silo %s shut down during the turn", codes.Unavailable, w.s.cfg.Silo)
			}
		}
		key := taskKey(ctx, w.s.prefix, id)
		if ferr := w.s.store.failActive(ctx, w.s.prefix+activeDir+string(id), activeRecord{Key: key, Silo: w.s.cfg.Silo}, reason); ferr != nil {
			q.fail(id, ferr)
			return
		}
		if st, gerr = w.s.store.Get(ctx, id); gerr != nil {
			q.fail(id, gerr)
			return
		}
	}
	q.publish(id, st.Task, st.Version)
}
