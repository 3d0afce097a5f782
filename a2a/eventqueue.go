package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// queues is the SDK's eventqueue.Manager of a silo: how the events of a
// task's execution reach the requests that wait for them. Every event the
// executions produce is in etcd already (the task store writes it with the
// task, see taskRecord), so two kinds of reader serve:
//
//   - a local reader, for requests on the silo that runs the execution: the
//     request that started it (executions run on the silo that took the
//     request, see work), and subscriptions and cancels that arrive while
//     it runs here. It reads the execution's events from memory, in order,
//     as the SDK writes them after storing each.
//   - a remote reader, for everything else (a subscription or a cancel
//     through another silo): a watch on the task's key from the revision it
//     was created at, which yields each stored write as its event.
//
// Both give events with their task version (the etcd revision), which the
// SDK's subscription uses to skip what its snapshot covers.
type queues struct {
	store *taskStore
	base  context.Context // ends the remote readers' watches at Close

	mu      sync.Mutex
	brokers map[spec.TaskID]*broker
}

var _ eventqueue.Manager = (*queues)(nil)

func newQueues(base context.Context, store *taskStore) *queues {
	return &queues{store: store, base: base, brokers: make(map[spec.TaskID]*broker)}
}

// broker holds the events of executions of one task on this silo.
type broker struct {
	mu      sync.Mutex
	log     []*eventqueue.Message
	err     error         // set by fail: readers report it once they have read the log
	changed chan struct{} // closed and replaced on every append or fail
	readers int
	writers int
}

func newBroker() *broker { return &broker{changed: make(chan struct{})} }

func (b *broker) appendMsg(m *eventqueue.Message) {
	b.mu.Lock()
	b.log = append(b.log, m)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// sawFinal reports whether the log holds an event that ends a
// subscription.
func (b *broker) sawFinal() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.log {
		if isFinal(m.Event) {
			return true
		}
	}
	return false
}

func (b *broker) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// isFinal reports whether ev ends a subscription: a message, or a task or
// status in a terminal or input-required state (the SDK's rule).
func isFinal(ev spec.Event) bool {
	switch v := ev.(type) {
	case *spec.Message:
		return true
	case *spec.Task:
		return v.Status.State.Terminal() || v.Status.State == spec.TaskStateInputRequired
	case *spec.TaskStatusUpdateEvent:
		return v.Status.State.Terminal() || v.Status.State == spec.TaskStateInputRequired
	}
	return false
}

// attach returns the broker of id, made if need be, counting a reader or
// a writer.
func (q *queues) attach(id spec.TaskID, writer bool) *broker {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.brokers[id]
	if b == nil {
		b = newBroker()
		q.brokers[id] = b
	}
	if writer {
		b.writers++
	} else {
		b.readers++
	}
	return b
}

// detach undoes attach, dropping the broker when nobody uses it.
func (q *queues) detach(id spec.TaskID, b *broker, writer bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if writer {
		b.writers--
	} else {
		b.readers--
	}
	if b.readers == 0 && b.writers == 0 && q.brokers[id] == b {
		delete(q.brokers, id)
	}
}

// runningHere reports whether an execution or a cancel of id writes events
// on this silo.
func (q *queues) runningHere(id spec.TaskID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.brokers[id]
	return b != nil && b.writers > 0
}

// CreateReader implements eventqueue.Manager.
func (q *queues) CreateReader(ctx context.Context, id spec.TaskID) (eventqueue.Reader, error) {
	method := ""
	if cc, ok := a2asrv.CallContextFrom(ctx); ok {
		method = cc.Method()
	}
	// A send starts its execution here (see work.Write), after this
	// reader exists.
	if method == "SendMessage" || method == "SendStreamingMessage" || q.runningHere(id) {
		b := q.attach(id, false)
		b.mu.Lock()
		at := len(b.log)
		b.mu.Unlock()
		return &localReader{q: q, id: id, b: b, at: at}, nil
	}
	return q.remote(ctx, id)
}

// CreateWriter implements eventqueue.Manager.
func (q *queues) CreateWriter(_ context.Context, id spec.TaskID) (eventqueue.Writer, error) {
	return &localWriter{q: q, id: id, b: q.attach(id, true)}, nil
}

// Destroy implements eventqueue.Manager: the task's local readers end.
func (q *queues) Destroy(_ context.Context, id spec.TaskID) error {
	q.mu.Lock()
	b := q.brokers[id]
	q.mu.Unlock()
	if b != nil {
		b.fail(eventqueue.ErrQueueClosed)
	}
	return nil
}

// fail makes the local readers of id report err: an execution that ended
// before it produced an event.
func (q *queues) fail(id spec.TaskID, err error) {
	q.mu.Lock()
	b := q.brokers[id]
	q.mu.Unlock()
	if b != nil {
		b.fail(err)
	}
}

// publish adds ev to the local log of id, for an execution that ended
// without the SDK writing its final event (see work.run).
func (q *queues) publish(id spec.TaskID, ev spec.Event, v taskstore.TaskVersion) {
	q.mu.Lock()
	b := q.brokers[id]
	q.mu.Unlock()
	if b != nil {
		b.appendMsg(&eventqueue.Message{Event: ev, TaskVersion: v, Protocol: spec.Version})
	}
}

type localWriter struct {
	q    *queues
	id   spec.TaskID
	b    *broker
	once sync.Once
}

func (w *localWriter) Write(_ context.Context, m *eventqueue.Message) error {
	w.b.appendMsg(m)
	return nil
}

func (w *localWriter) Close() error {
	w.once.Do(func() { w.q.detach(w.id, w.b, true) })
	return nil
}

// localReader reads a broker's log from where it was when the reader was
// made: what came before is in the snapshot the SDK's subscription reads
// from the store after making the reader (and the subscription skips
// events of versions its snapshot covers).
type localReader struct {
	q    *queues
	id   spec.TaskID
	b    *broker
	at   int // next index
	once sync.Once
}

func (r *localReader) Read(ctx context.Context) (*eventqueue.Message, error) {
	for {
		r.b.mu.Lock()
		if r.at < len(r.b.log) {
			m := r.b.log[r.at]
			r.at++
			r.b.mu.Unlock()
			return m, nil
		}
		err, changed := r.b.err, r.b.changed
		r.b.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *localReader) Close() error {
	r.once.Do(func() { r.q.detach(r.id, r.b, false) })
	return nil
}

// remote makes a reader watching the task's key in etcd from now on.
func (q *queues) remote(ctx context.Context, id spec.TaskID) (eventqueue.Reader, error) {
	key := taskKey(ctx, q.store.prefix, id)
	if key == "" {
		return nil, spec.ErrTaskNotFound
	}
	resp, err := q.store.cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "a2a: subscribe to task %s", id)
	}
	wctx, cancel := context.WithCancel(q.base)
	stop := context.AfterFunc(ctx, cancel)
	w := q.store.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(resp.Header.Revision+1))
	return &remoteReader{w: w, cancel: func() { stop(); cancel() }}, nil
}

// remoteReader turns the writes of a task's key into its events.
type remoteReader struct {
	w       clientv3.WatchChan
	cancel  func()
	pending []*clientv3.Event
}

func (r *remoteReader) Read(ctx context.Context) (*eventqueue.Message, error) {
	for {
		for len(r.pending) > 0 {
			ev := r.pending[0]
			r.pending = r.pending[1:]
			if ev.Type != mvccpb.PUT {
				return nil, fmt.Errorf("a2a: the task was deleted: %w", spec.ErrTaskNotFound)
			}
			m, err := recordEvent(ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				return nil, err
			}
			if m != nil {
				return m, nil
			}
		}
		select {
		case resp, ok := <-r.w:
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, eventqueue.ErrQueueClosed
			}
			if err := resp.Err(); err != nil {
				return nil, fmt.Errorf("a2a: watching the task: %w", etcderr.Wrap(err))
			}
			r.pending = append(r.pending, resp.Events...)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *remoteReader) Close() error {
	r.cancel()
	return nil
}

// recordEvent is the event a stored write of a task (its value b at
// revision rev) stands for: the status or artifact event it applied; the
// task itself for a whole-task write, or when the write ended the task
// while the event it recorded does not say so (the SDK records the event
// it failed to process with the failed task); nothing for a user message
// added to the history.
func recordEvent(b []byte, rev int64) (*eventqueue.Message, error) {
	rec, err := decodeRecord(b)
	if err != nil {
		return nil, err
	}
	var ev spec.Event
	if len(rec.Event) > 0 {
		var sr spec.StreamResponse
		if err := json.Unmarshal(rec.Event, &sr); err != nil {
			return nil, fmt.Errorf("a2a: corrupt task event: %w", err)
		}
		ev = sr.Event
	}
	switch {
	case isFinal(rec.Task) && (ev == nil || !isFinal(ev)):
		ev = rec.Task
	case rec.Kind == "message":
		return nil, nil
	case ev == nil:
		ev = rec.Task
	}
	if ev == nil {
		return nil, errors.New("a2a: corrupt task event")
	}
	return &eventqueue.Message{Event: ev, TaskVersion: taskstore.TaskVersion(rev), Protocol: spec.Version}, nil
}
