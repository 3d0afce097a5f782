package a2a

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/audit/auditstore"
	"github.com/agentsilo/agentsilo/internal/etcdbatch"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// taskStore is the SDK's taskstore.Store in etcd, shared by every silo:
// one key per task (see call.go's layout), its JSON taskRecord as value,
// its mod revision as the task's version (optimistic concurrency: an
// update names the revision it read and fails with
// ErrConcurrentModification if another write came in between).
//
// A task is reachable only through its agent's endpoint and by the
// principal that created it: the key is made of the call's agent and
// principal (callFrom), so another caller's Get finds nothing
// (ErrTaskNotFound, as the spec asks).
//
// Each write also records what it applied (a status or artifact event), so
// that a watch on the key is a complete, ordered stream of a task's events
// for subscribers on other silos (remoteReader), and, in the same
// transaction, keeps the task's marker under a2a/active/ while the task is
// being worked on (see activeState), for the reaper.
//
// Writes go through the etcd client's group commit (internal/etcdbatch),
// each a nested transaction with its own condition in a transaction shared
// with the other writes that arrive together.
//
// Methods are safe for concurrent use.
type taskStore struct {
	cli    *clientv3.Client
	prefix string
	silo   string
	lease  func() clientv3.LeaseID // this silo's A2A lease, named in active markers
	retain *retainer               // the leases of terminal tasks (see retention.go)
	logger *slog.Logger
}

// taskRecord is a task's value in etcd.
type taskRecord struct {
	Task  *spec.Task `json:"task"`
	User  string     `json:"user"`
	Agent string     `json:"agent"`
	// Kind says what the write applied: "" for a whole task (a create, a
	// task snapshot, a failure the SDK recorded), "status", "artifact", or
	// "message" (a user message added to the history).
	Kind  string          `json:"kind,omitempty"`
	Event json.RawMessage `json:"event,omitempty"`
}

// activeRecord is a task's marker while it is worked on.
type activeRecord struct {
	Key   string `json:"key"`
	Silo  string `json:"silo"`
	Lease int64  `json:"lease"`
}

// activeState reports whether a task in state s is being worked on by a
// silo, which must then be alive: submitted, working, and the transient
// auth-required. Terminal states and input-required rest.
func activeState(s spec.TaskState) bool {
	return s == spec.TaskStateSubmitted || s == spec.TaskStateWorking || s == spec.TaskStateAuthRequired
}

var _ taskstore.Store = (*taskStore)(nil)

// Create implements taskstore.Store.
func (s *taskStore) Create(ctx context.Context, task *spec.Task) (taskstore.TaskVersion, error) {
	return s.createWith(ctx, task, nil)
}

// createWith creates task as Create does, with the audit record staged
// (if not nil) in the same transaction; staged.written says whether it
// was written.
func (s *taskStore) createWith(ctx context.Context, task *spec.Task, staged *stagedRecord) (taskstore.TaskVersion, error) {
	if task == nil {
		return 0, invalidParams("no task")
	}
	key := taskKey(ctx, s.prefix, task.ID)
	if key == "" {
		return 0, spec.ErrTaskNotFound
	}
	rec := s.record(ctx, task)
	rev, _, err := s.writeWith(ctx, key, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), rec, task.ID, staged)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return 0, taskstore.ErrTaskAlreadyExists
	}
	return taskstore.TaskVersion(rev), nil
}

// Update implements taskstore.Store.
func (s *taskStore) Update(ctx context.Context, req *taskstore.UpdateRequest) (taskstore.TaskVersion, error) {
	if req == nil || req.Task == nil {
		return 0, invalidParams("no task")
	}
	key := taskKey(ctx, s.prefix, req.Task.ID)
	if key == "" {
		return 0, spec.ErrTaskNotFound
	}
	rec := s.record(ctx, req.Task)
	var err error
	if rec.Kind, rec.Event, err = eventRecord(req.Event); err != nil {
		return 0, err
	}
	cond := clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	if req.PrevVersion != taskstore.TaskVersionMissing {
		cond = clientv3.Compare(clientv3.ModRevision(key), "=", int64(req.PrevVersion))
	}
	rev, exists, err := s.write(ctx, key, cond, rec, req.Task.ID)
	switch {
	case err != nil:
		return 0, err
	case rev == 0 && !exists:
		return 0, spec.ErrTaskNotFound
	case rev == 0:
		return 0, taskstore.ErrConcurrentModification
	}
	return taskstore.TaskVersion(rev), nil
}

// record is the value of task written by the call of ctx.
func (s *taskStore) record(ctx context.Context, task *spec.Task) taskRecord {
	c := callFrom(ctx)
	return taskRecord{Task: task, User: c.caller.Principal, Agent: c.agent.String()}
}

// eventRecord says what an update applied.
func eventRecord(ev spec.Event) (string, json.RawMessage, error) {
	var kind string
	switch ev.(type) {
	case nil, *spec.Task:
		return "", nil, nil
	case *spec.Message:
		return "message", nil, nil
	case *spec.TaskStatusUpdateEvent:
		kind = "status"
	case *spec.TaskArtifactUpdateEvent:
		kind = "artifact"
	default:
		return "", nil, fmt.Errorf("a2a: task store: unexpected event %T", ev)
	}
	b, err := json.Marshal(spec.StreamResponse{Event: ev})
	return kind, b, err
}

// write puts rec at key if cond holds, and sets or clears the task's active
// marker in the same transaction. It returns the new revision, or 0 if
// cond failed and then whether the key exists.
func (s *taskStore) write(ctx context.Context, key string, cond clientv3.Cmp, rec taskRecord, id spec.TaskID) (rev int64, exists bool, err error) {
	return s.writeWith(ctx, key, cond, rec, id, nil)
}

// writeWith is write, with the audit record staged (if not nil) in the
// same transaction.
func (s *taskStore) writeWith(ctx context.Context, key string, cond clientv3.Cmp, rec taskRecord, id spec.TaskID, staged *stagedRecord) (rev int64, exists bool, err error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return 0, false, fmt.Errorf("a2a: task store: %w", err)
	}
	var lease clientv3.LeaseID
	if rec.Task.Status.State.Terminal() {
		if lease, err = s.retain.lease(ctx); err != nil {
			return 0, false, err
		}
	}
	sendOf(ctx).writing(id)
	for retried := false; ; retried = true {
		// Through the client's group commit: the writes of tasks that
		// arrive together (and topics' publishes) share a transaction.
		w := s.taskWrite(key, cond, val, id, rec.Task.Status.State, lease)
		if staged != nil {
			w.Then = append(w.Then, staged.st.Op)
		}
		err := etcdbatch.Of(s.cli).Do(ctx, w)
		if staged != nil {
			var resp *pb.ResponseOp
			if err == nil && w.Succeeded && len(w.Responses) > 3 {
				resp = w.Responses[3]
			}
			staged.written = staged.st.Settle(err == nil, w.Revision, resp)
		}
		if err != nil && lease != 0 && !retried && leaseGone(err) {
			s.retain.forget(lease)
			if lease, err = s.retain.lease(ctx); err != nil {
				return 0, false, err
			}
			continue
		}
		if err != nil {
			sendOf(ctx).setPushes(id, nil, false)
			return 0, false, etcderr.FromCall(ctx, err, "a2a: task store: write task %s", id)
		}
		rev, exists = s.written(ctx, w, id, lease)
		return rev, exists, nil
	}
}

// taskWrite is the write of a task's value val at key (on lease, a
// terminal task's, see retention.go) if cond holds, in one transaction
// with the task's active marker (set or removed for state st) and a read
// of its push configs (the SDK lists them after each write it makes, see
// sendState; a terminal write puts them on its lease). If cond fails, it
// reads whether the key exists.
func (s *taskStore) taskWrite(key string, cond clientv3.Cmp, val []byte, id spec.TaskID, st spec.TaskState, lease clientv3.LeaseID) *etcdbatch.Write {
	return &etcdbatch.Write{
		If: []clientv3.Cmp{cond},
		Then: []clientv3.Op{
			clientv3.OpPut(key, string(val), withLease(lease)...),
			s.markerOp(key, id, st),
			clientv3.OpGet(s.prefix+pushDir+string(id)+"/", clientv3.WithPrefix()),
		},
		Else: []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())},
	}
}

// written settles a committed taskWrite of id for the call of ctx: it
// returns the revision it wrote, or 0 if its condition failed and then
// whether the key exists; it keeps the push configs it read for the SDK's
// List, and puts them on the task's lease, if any.
func (s *taskStore) written(ctx context.Context, w *etcdbatch.Write, id spec.TaskID, lease clientv3.LeaseID) (rev int64, exists bool) {
	if !w.Succeeded {
		sendOf(ctx).setPushes(id, nil, false)
		return 0, len(w.Responses) > 0 && len(w.Responses[0].GetResponseRange().Kvs) > 0
	}
	kvs := w.Responses[2].GetResponseRange().Kvs
	sendOf(ctx).setPushes(id, kvs, true)
	if lease != 0 {
		s.retainPushConfigs(ctx, id, lease, kvs)
	}
	return w.Revision, true
}

// pendingCreate is the create of a new working task in the group commit's
// queue (the fast path, see fastpath.go): withdrawn if the task ends before
// it is sent, so that its one write is its end.
type pendingCreate struct {
	b    *etcdbatch.Batcher
	w    *etcdbatch.Write
	done chan struct{}
	rev  int64 // once done: the revision written, 0 if the task existed
	err  error
}

// createAsync starts the create of task, a new task in an active state,
// and returns at once.
func (s *taskStore) createAsync(ctx context.Context, task *spec.Task) (*pendingCreate, error) {
	key := taskKey(ctx, s.prefix, task.ID)
	if key == "" {
		return nil, spec.ErrTaskNotFound
	}
	val, err := json.Marshal(s.record(ctx, task))
	if err != nil {
		return nil, fmt.Errorf("a2a: task store: %w", err)
	}
	sendOf(ctx).writing(task.ID)
	p := &pendingCreate{
		b:    etcdbatch.Of(s.cli),
		w:    s.taskWrite(key, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), val, task.ID, task.Status.State, 0),
		done: make(chan struct{}),
	}
	p.b.Go(p.w) // queued now: withdraw finds it until it is sent
	go func() {
		defer close(p.done)
		if err := p.b.Wait(ctx, p.w); err != nil {
			p.err = err
			if !errors.Is(err, etcdbatch.ErrWithdrawn) {
				p.err = etcderr.FromCall(ctx, err, "a2a: task store: write task %s", task.ID)
			}
			return
		}
		if p.rev, _ = s.written(ctx, p.w, task.ID, 0); p.rev == 0 {
			p.err = taskstore.ErrTaskAlreadyExists
		}
	}()
	return p, nil
}

// withdraw takes the create back if it waits to be sent, and reports
// whether it did: the task is then not written.
func (p *pendingCreate) withdraw() bool {
	if !p.b.Withdraw(p.w) {
		return false
	}
	<-p.done
	return true
}

// wait returns the revision the task was written at, once settled.
func (p *pendingCreate) wait() (int64, error) {
	<-p.done
	return p.rev, p.err
}

// withLease is the option that puts a key on lease, none for 0.
func withLease(lease clientv3.LeaseID) []clientv3.OpOption {
	if lease == 0 {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithLease(lease)}
}

// markerOp sets the active marker of a task in state st, or removes it.
func (s *taskStore) markerOp(key string, id spec.TaskID, st spec.TaskState) clientv3.Op {
	akey := s.prefix + activeDir + string(id)
	if !activeState(st) {
		return clientv3.OpDelete(akey)
	}
	b, _ := json.Marshal(activeRecord{Key: key, Silo: s.silo, Lease: int64(s.lease())})
	return clientv3.OpPut(akey, string(b))
}

// Get implements taskstore.Store.
func (s *taskStore) Get(ctx context.Context, id spec.TaskID) (*taskstore.StoredTask, error) {
	key := taskKey(ctx, s.prefix, id)
	if key == "" || sendOf(ctx).unwritten(id) {
		return nil, spec.ErrTaskNotFound
	}
	rec, rev, err := s.get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &taskstore.StoredTask{Task: rec.Task, Version: taskstore.TaskVersion(rev), User: rec.User}, nil
}

// get reads the record at key: ErrTaskNotFound if there is none.
func (s *taskStore) get(ctx context.Context, key string) (*taskRecord, int64, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, etcderr.FromCall(ctx, err, "a2a: task store: get task")
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, spec.ErrTaskNotFound
	}
	rec, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

func decodeRecord(b []byte) (*taskRecord, error) {
	var rec taskRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("a2a: task store: corrupt task: %w", err)
	}
	if rec.Task == nil {
		return nil, errors.New("a2a: task store: corrupt task: no task")
	}
	return &rec, nil
}

// List implements taskstore.Store: the caller's tasks with the call's
// agent, most recently updated first.
func (s *taskStore) List(ctx context.Context, req *spec.ListTasksRequest) (*spec.ListTasksResponse, error) {
	c := callFrom(ctx)
	if c == nil {
		return nil, spec.ErrUnauthenticated
	}
	if req == nil {
		req = &spec.ListTasksRequest{}
	}
	size := req.PageSize
	switch {
	case size == 0:
		size = 50
	case size < 1 || size > 100:
		return nil, invalidParams("pageSize %d: want 1 to 100", size)
	}
	if req.HistoryLength != nil && *req.HistoryLength < 0 {
		return nil, invalidParams("historyLength %d is negative", *req.HistoryLength)
	}
	var after pageToken
	if req.PageToken != "" {
		var err error
		if after, err = parsePageToken(req.PageToken); err != nil {
			return nil, err
		}
	}
	prefix := taskPrefix(s.prefix, c.agent, c.caller.Principal)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, etcderr.FromCall(ctx, err, "a2a: task store: list tasks")
	}
	type entry struct {
		task *spec.Task
		rev  int64
	}
	var all []entry
	for _, kv := range resp.Kvs {
		rec, err := decodeRecord(kv.Value)
		if err != nil {
			return nil, err
		}
		t := rec.Task
		if req.ContextID != "" && t.ContextID != req.ContextID ||
			req.Status != spec.TaskStateUnspecified && t.Status.State != req.Status ||
			req.StatusTimestampAfter != nil && (t.Status.Timestamp == nil || t.Status.Timestamp.Before(*req.StatusTimestampAfter)) {
			continue
		}
		all = append(all, entry{t, kv.ModRevision})
	}
	slices.SortFunc(all, func(a, b entry) int {
		if c := cmp.Compare(b.rev, a.rev); c != 0 {
			return c
		}
		return strings.Compare(string(b.task.ID), string(a.task.ID))
	})
	start := 0
	if req.PageToken != "" {
		start = len(all)
		for i, e := range all {
			if e.rev < after.rev || e.rev == after.rev && string(e.task.ID) < after.id {
				start = i
				break
			}
		}
	}
	out := &spec.ListTasksResponse{Tasks: []*spec.Task{}, TotalSize: len(all), PageSize: size}
	page := all[start:]
	if len(page) > size {
		last := page[size-1]
		out.NextPageToken = pageToken{rev: last.rev, id: string(last.task.ID)}.String()
		page = page[:size]
	}
	for _, e := range page {
		t := e.task
		trimHistory(t, req.HistoryLength, 100)
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		out.Tasks = append(out.Tasks, t)
	}
	return out, nil
}

// trimHistory keeps the last n messages of t's history (def without n).
func trimHistory(t *spec.Task, n *int, def int) {
	keep := def
	if n != nil {
		keep = *n
	}
	if keep == 0 {
		t.History = []*spec.Message{}
	} else if keep > 0 && len(t.History) > keep {
		t.History = t.History[len(t.History)-keep:]
	}
}

// pageToken is where a listing page ends: the last task's revision and id.
type pageToken struct {
	rev int64
	id  string
}

func (p pageToken) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.rev, 10) + ":" + p.id))
}

// parsePageToken parses a token String made: InvalidParams for anything
// else.
func parsePageToken(s string) (pageToken, error) {
	bad := invalidParams("invalid pageToken")
	if len(s) > 512 {
		return pageToken{}, bad
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return pageToken{}, bad
	}
	revs, id, ok := strings.Cut(string(b), ":")
	rev, err := strconv.ParseInt(revs, 10, 64)
	if !ok || err != nil || rev <= 0 || !validID(id) {
		return pageToken{}, bad
	}
	return pageToken{rev: rev, id: id}, nil
}

// failActive ends a task that its silo left while it was worked on: if the
// task at key is still in an active state at the revision read, it is
// failed with reason, and its marker removed. Another silo doing the same
// at once loses the compare and does nothing.
func (s *taskStore) failActive(ctx context.Context, akey string, a activeRecord, reason string) error {
	rec, rev, err := s.get(ctx, a.Key)
	if errors.Is(err, spec.ErrTaskNotFound) {
		_, err = s.cli.Delete(ctx, akey)
		return err
	}
	if err != nil {
		return err
	}
	t := rec.Task
	if !activeState(t.Status.State) {
		_, err = s.cli.Delete(ctx, akey)
		return err
	}
	now := time.Now().UTC()
	ev := spec.NewStatusUpdateEvent(t, spec.TaskStateFailed, spec.NewMessageForTask(spec.MessageRoleAgent, t, spec.NewTextPart(reason)))
	ev.Status.Message.Metadata = map[string]any{metaCode: "Unavailable"}
	ev.Status.Timestamp = &now
	if t.Status.Message != nil {
		t.History = append(t.History, t.Status.Message)
	}
	t.Status = ev.Status
	rec.Kind, rec.Event, err = eventRecord(ev)
	if err != nil {
		return err
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	lease, err := s.retain.lease(ctx)
	if err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(a.Key), "=", rev)).
		Then(clientv3.OpPut(a.Key, string(val), withLease(lease)...), clientv3.OpDelete(akey),
			clientv3.OpGet(s.prefix+pushDir+string(t.ID)+"/", clientv3.WithPrefix())).Commit()
	if leaseGone(err) {
		s.retain.forget(lease) // the next reap, at the next start, tries again
	}
	if err == nil && resp.Succeeded && lease != 0 {
		s.retainPushConfigs(ctx, t.ID, lease, resp.Responses[2].GetResponseRange().Kvs)
	}
	return err
}

// stagedRecord is an audit record staged in a task's write (see
// Server.stage); written says whether that write wrote it.
type stagedRecord struct {
	st      *auditstore.Staged
	written bool
}

// stage stages rec (nil: nothing) for the task write that follows, if the
// audit's store is the etcd the tasks are in; nil if it cannot (the
// caller then appends rec with the log).
func (s *Server) stage(ctx context.Context, rec *audit.Record) *stagedRecord {
	if rec == nil || !s.audit.Enabled() {
		return nil
	}
	st, ok := s.audit.Store().(*auditstore.Etcd)
	if !ok || st.Client() != s.store.cli {
		return nil
	}
	p, r, err := s.audit.Prepare(*rec)
	if err != nil {
		return nil
	}
	staged, err := st.Stage(ctx, p, r)
	if err != nil {
		return nil
	}
	return &stagedRecord{st: staged}
}
