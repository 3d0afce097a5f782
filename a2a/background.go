package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// Background follows: an Ask with StateFollow=background sends the
// message without waiting (returnImmediately), records the task in the
// agent's state (the silo's state store: etcd by default), makes sure a
// durable reminder of the agent runs every FollowCheck, and answers with
// the task's ids at once. A goroutine of the activation then follows the
// task, off the agent's turns; when it settles, the result is
//
//  1. written to the working memory, Memory:<owner>:a2a, under
//     "<alias>/<task id>" (if the silo has the Memory type),
//  2. sent to the caller as a one-way message of TypeResult whose
//     idempotency key is "a2a-result:<task id>", and
//  3. removed from the agent's state.
//
// If the silo dies on the way, the agent's reminder fires on the silo that
// hosts it next, which resumes every task still recorded. A result sent
// again after a crash between steps 2 and 3 carries the same idempotency
// key, and the receiver's silo drops it: the caller gets it once (unless
// the receiver's silo failed too within the same moment; see the runtime's
// idempotency window).

// typeFollowTick is the message type of the background follow reminder.
const typeFollowTick = "a2a.follow.tick"

// followReminder names the reminder.
const followReminder = "a2a-follow"

// MemoryScope is the alias, under the A2A agent's owner, of the working
// memory that background results are written to (Memory:<owner>:a2a),
// each under the key "<A2A agent alias>/<task id>".
const MemoryScope = "a2a"

// maxFollows bounds the background follows one agent keeps at once.
const maxFollows = 256

// followRecord is a followed task in the agent's state.
type followRecord struct {
	Caller string `json:"caller"`
	// OnBehalfOf is the principal the Ask was made for, whose token a
	// delegating agent sends with the follow's requests.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Scopes are those of the skill the Ask called, which the follow's
	// delegated tokens carry.
	Scopes    []string  `json:"scopes,omitempty"`
	ContextID string    `json:"context_id,omitempty"`
	Since     time.Time `json:"since"`
}

// followState is the agent's state: its background follows by task id.
type followState struct {
	Follows map[spec.TaskID]followRecord `json:"follows,omitempty"`
}

// background is an activation's running follows.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards running and state
	running map[spec.TaskID]bool
	state   *grain.State[followState]
	loaded  bool
}

func (r *remote) background() *background {
	if r.bg == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.bg = &background{ctx: ctx, cancel: cancel, running: map[spec.TaskID]bool{}, state: grain.NewState[followState](r.h)}
	}
	return r.bg
}

// stopBackground ends the activation's follows (they resume from the
// state at the next reminder tick, wherever the agent is then).
func (r *remote) stopBackground() {
	if r.bg != nil {
		r.bg.cancel()
		r.bg.wg.Wait()
	}
}

// update changes the recorded follows under the lock, saving them.
func (b *background) update(ctx context.Context, change func(*followState) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.loaded {
		if err := b.state.Load(ctx); err != nil {
			return err
		}
		b.loaded = true
	}
	return b.state.Update(ctx, func(s *followState) error {
		if s.Follows == nil {
			s.Follows = map[spec.TaskID]followRecord{}
		}
		return change(s)
	})
}

// startBackground sends msg without waiting, records the task and starts
// following it.
func (r *remote) startBackground(ctx context.Context, m *grain.Message, msg *spec.Message) (*grain.Message, error) {
	if m.From == "" {
		return nil, errs.New(codes.InvalidArgument, "%s: a background follow needs a caller to deliver its result to", r.h.Address())
	}
	out, err := r.client.SendMessage(ctx, &spec.SendMessageRequest{Message: msg, Config: &spec.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		return nil, remoteError(err)
	}
	res := &remoteResult{}
	res.apply(out, func(*grain.Message) {})
	if res.taskID == "" {
		return res.reply(m) // a message: the result itself, no task to follow
	}
	b := r.background()
	rec := followRecord{Caller: m.From, OnBehalfOf: m.OnBehalfOf, Scopes: delegatedScopes(ctx), ContextID: res.contextID, Since: r.set.clk.Now()}
	err = b.update(ctx, func(s *followState) error {
		if _, ok := s.Follows[res.taskID]; !ok && len(s.Follows) >= maxFollows {
			return errs.New(codes.ResourceExhausted, "%s follows %d tasks in the background already", r.h.Address(), maxFollows)
		}
		s.Follows[res.taskID] = rec
		return nil
	})
	if err != nil {
		r.cancelRemote(ctx, res.taskID)
		return nil, err
	}
	if err := r.h.RegisterReminder(ctx, followReminder, r.check, r.check, typeFollowTick, ""); err != nil {
		r.h.Logger().WarnContext(ctx, "a2a: the background follow's reminder", "err", err)
	}
	r.metrics.background.WithLabelValues("started").Inc()
	r.startFollow(res.taskID, rec)
	reply := m.Response()
	reply.State = remoteState(res.contextID, res.taskID, res.state)
	reply.State[StateFollow] = FollowBackground
	return reply, nil
}

// resume starts a follow for every recorded task that is not followed
// here yet (the reminder's tick); with none left, it removes the
// reminder.
func (r *remote) resume(ctx context.Context) error {
	b := r.background()
	var follows map[spec.TaskID]followRecord
	if err := b.update(ctx, func(s *followState) error {
		follows = s.Follows
		return errNoChange
	}); err != nil && !errors.Is(err, errNoChange) {
		return err
	}
	if len(follows) == 0 {
		return r.h.UnregisterReminder(ctx, followReminder)
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	for id, rec := range follows {
		if r.startFollow(id, rec) {
			r.metrics.background.WithLabelValues("resumed").Inc()
		}
	}
	return nil
}

// errNoChange ends an update that reads only.
var errNoChange = errors.New("no change")

// startFollow starts following task id in the background unless it is
// followed here already, and reports whether it started.
func (r *remote) startFollow(id spec.TaskID, rec followRecord) bool {
	b := r.background()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[id] || b.ctx.Err() != nil {
		return false
	}
	b.running[id] = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			delete(b.running, id)
			b.mu.Unlock()
		}()
		r.runFollow(b.ctx, id, rec)
	}()
	return true
}

// runFollow follows task id until it settles, then delivers its result;
// a remote that refuses to say how the task is (it is gone, the
// credentials are refused: not a transient failure, which follow retries)
// or a task older than MaxFollow ends the follow with that error. ctx
// ends it without a result (the activation ends: the reminder resumes it).
func (r *remote) runFollow(ctx context.Context, id spec.TaskID, rec followRecord) {
	ctx = withPrincipal(ctx, rec.OnBehalfOf, rec.Scopes)
	push := func(p *grain.Message) {
		if err := r.h.Send(ctx, rec.Caller, p); err != nil {
			r.h.Logger().DebugContext(ctx, "a2a: progress to the caller", "err", err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, r.maxFollow-clock.Since(r.set.clk, rec.Since))
	defer cancel()
	res := &remoteResult{taskID: id, contextID: rec.ContextID, state: spec.TaskStateWorking}
	err := r.follow(fctx, res, push)
	switch {
	case ctx.Err() != nil:
		return
	case fctx.Err() != nil:
		r.cancelRemote(ctx, id)
		err = errs.New(codes.DeadlineExceeded, "the remote task %s did not end within %v of its start: cancelled", id, r.maxFollow)
	case err != nil:
		err = remoteError(err)
	}
	r.deliver(ctx, id, rec, res, err)
}

// deliver writes the result of task id to the working memory, sends it to
// the caller and removes the task from the agent's state.
func (r *remote) deliver(ctx context.Context, id spec.TaskID, rec followRecord, res *remoteResult, err error) {
	var msg *grain.Message
	if err == nil {
		msg, err = res.reply(&grain.Message{Kind: grain.KindRequest})
	}
	if err == nil && res.state == spec.TaskStateInputRequired {
		_, err = r.question(ctx, res)
	}
	if err != nil {
		msg = &grain.Message{Message: err.Error(), State: remoteState(res.contextID, id, res.state)}
		msg.State[StateError], msg.State[StateCode] = err.Error(), errs.Code(err).String()
	} else if res.state.Terminal() {
		r.guards.done(id)
	}
	msg.MessageType, msg.Kind, msg.CorrelationID, msg.ID = TypeResult, grain.KindOneWay, "", ""
	msg.IdempotencyKey = "a2a-result:" + string(id)

	if body, jerr := json.Marshal(resultEntry{Message: msg.Message, Data: msg.Data, DataType: msg.DataType, State: msg.State}); jerr == nil {
		mem := grain.Address{Type: "Memory", Owner: r.h.Owner(), Alias: MemoryScope}.String()
		put := &grain.Message{MessageType: "memory.put", DataType: "application/json", Data: mustJSON(map[string]any{"entry": map[string]any{
			"key": r.h.Address().Alias + "/" + string(id), "text": msg.Message, "value": json.RawMessage(body), "category": "a2a.result", "tags": []string{"a2a", string(res.state)},
		}})}
		if _, err := r.h.Ask(ctx, mem, put); err != nil {
			r.h.Logger().DebugContext(ctx, "a2a: the result into the working memory", "memory", mem, "err", err)
		}
	}
	wait := retry.Redeliver.New(r.set.clk)
	for {
		if err := r.h.WaitServing(ctx); err != nil {
			return
		}
		err := r.h.Send(ctx, rec.Caller, msg)
		if err == nil || ctx.Err() != nil {
			break
		}
		if c := errs.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.ResourceExhausted {
			r.h.Logger().WarnContext(ctx, "a2a: the background result could not be delivered", "task", id, "caller", rec.Caller, "err", err)
			break
		}
		if !wait.Wait(ctx, nil) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	r.metrics.background.WithLabelValues("delivered").Inc()
	err = r.background().update(ctx, func(s *followState) error {
		if _, ok := s.Follows[id]; !ok {
			return errNoChange
		}
		delete(s.Follows, id)
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		r.h.Logger().WarnContext(ctx, "a2a: removing a delivered follow", "task", id, "err", err)
	}
}

// resultEntry is a background result as kept in the working memory.
type resultEntry struct {
	Message  string            `json:"message,omitempty"`
	Data     []byte            `json:"data,omitempty"`
	DataType string            `json:"data_type,omitempty"`
	State    map[string]string `json:"state,omitempty"`
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// delegatedScopes are the scopes ctx's delegated tokens carry.
func delegatedScopes(ctx context.Context) []string {
	d, _ := ctx.Value(principalKey{}).(delegation)
	return d.scopes
}
