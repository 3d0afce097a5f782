package a2a

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// How an agent of RemoteType follows a remote task that is not done when
// its first answer comes (submitted or working):
//
//   - If the remote agent's card says it streams, the agent subscribes to
//     the task again (SubscribeToTask) and relays its updates.
//   - Otherwise, or when that stream ends early, it polls the task
//     (GetTask), waiting PollMin, then doubling up to PollMax, each wait
//     jittered, and pushes each new status message to the caller.
//
// It stops at a terminal state, at input-required or auth-required, or
// when the Ask's context ends (then it cancels the remote task).
//
// An input-required answer is a round of questions: the loop guard of the
// task counts them and the exchanges (question and answer) that repeat,
// and ends the task when one of its limits is hit.

// The defaults of RemoteOptions' follow and loop settings.
const (
	DefaultPollMin    = 2 * time.Second
	DefaultPollMax    = 30 * time.Second
	DefaultMaxRounds  = 20
	DefaultMaxRepeats = 3
)

// The configuration keys of an agent of RemoteType that set its loop
// limits and polling (CreateAgent's config), over RemoteOptions'.
const (
	// ConfigMaxRounds is the most input-required questions one task may
	// ask (a positive integer).
	ConfigMaxRounds = "max_rounds"
	// ConfigMaxRepeats is how many times in a row the same question may
	// be answered the same way before the task is ended (at least 2).
	ConfigMaxRepeats = "max_repeats"
	// ConfigPollMin and ConfigPollMax bound the waits between polls of a
	// remote task (Go durations of at least 100ms: 2s, 30s).
	ConfigPollMin = "poll_min"
	ConfigPollMax = "poll_max"
)

// The state keys of an Ask to an agent of RemoteType that choose how it
// runs.
const (
	// StateFollow set to FollowBackground on an Ask makes it answer at
	// once with the task's ids (StateTaskID, StateContextID), and deliver
	// the result later as a one-way message of TypeResult to the caller.
	StateFollow      = "a2a.follow"
	FollowBackground = "background"
	// StateQuestions set to QuestionsAsk on an Ask makes every
	// input-required question of the remote task an Ask of
	// TypeInputRequired to the calling agent, whose reply is the answer:
	// the Ask to the remote agent then returns only with the task's end.
	// Without it, an input-required result is the reply (TypeInputRequired)
	// and the caller answers with a new Ask carrying the reply's state.
	StateQuestions = "a2a.questions"
	QuestionsAsk   = "ask"
	// StateRound is, on a question, its number within the task (from 1).
	StateRound = "a2a.round"
)

// TypeCancel is the message type of an Ask that cancels the remote task
// its state names (StateTaskID), such as one followed in the background.
const TypeCancel = "a2a.cancel"

// TypeResult is the message type of a background follow's result,
// delivered as a one-way message to the caller (its state as a reply's;
// an error as StateError with its code in StateCode).
const TypeResult = "a2a.result"

// The state keys of a background result that ended in an error.
const (
	StateError = "a2a.error"
	StateCode  = "a2a.code"
)

// The errors of the loop guard, with code ResourceExhausted: the remote
// task is cancelled.
var (
	// ErrTooManyRounds: the task asked more questions than max_rounds.
	ErrTooManyRounds = errs.New(codes.ResourceExhausted, "the remote task asked more questions than its round limit")
	// ErrRepeatedExchange: the same question got the same answer
	// max_repeats times in a row.
	ErrRepeatedExchange = errs.New(codes.ResourceExhausted, "the remote task and its caller repeated the same question and answer")
)

// followSettings are one remote agent's follow and loop settings.
type followSettings struct {
	pollMin, pollMax      time.Duration
	maxRounds, maxRepeats int
	clk                   clock.Clock
}

// defaults fills the zero fields of opts' settings.
func (o *RemoteOptions) settings() followSettings {
	s := followSettings{pollMin: o.PollMin, pollMax: o.PollMax, maxRounds: o.MaxRounds, maxRepeats: o.MaxRepeats, clk: o.clk}
	if s.pollMin <= 0 {
		s.pollMin = DefaultPollMin
	}
	if s.pollMax <= 0 {
		s.pollMax = DefaultPollMax
	}
	s.pollMax = max(s.pollMax, s.pollMin)
	if s.maxRounds <= 0 {
		s.maxRounds = DefaultMaxRounds
	}
	if s.maxRepeats <= 1 {
		s.maxRepeats = DefaultMaxRepeats
	}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	return s
}

// withConfig returns s with the agent's configuration applied, or an
// error naming a bad key.
func (s followSettings) withConfig(addr grain.Address, cfg map[string]string) (followSettings, error) {
	bad := func(key, v, want string) error {
		return errs.New(codes.FailedPrecondition, "%s: %s %q: want %s", addr, key, clipString(v), want)
	}
	if v := cfg[ConfigMaxRounds]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return s, bad(ConfigMaxRounds, v, "a positive integer")
		}
		s.maxRounds = n
	}
	if v := cfg[ConfigMaxRepeats]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			return s, bad(ConfigMaxRepeats, v, "an integer of at least 2")
		}
		s.maxRepeats = n
	}
	for key, p := range map[string]*time.Duration{ConfigPollMin: &s.pollMin, ConfigPollMax: &s.pollMax} {
		if v := cfg[key]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < minConfigPoll {
				return s, bad(key, v, "a duration of at least 100ms, such as 2s")
			}
			*p = d
		}
	}
	s.pollMax = max(s.pollMax, s.pollMin)
	return s, nil
}

// minConfigPoll is the shortest poll wait an agent's configuration may
// set, so that no configuration makes a silo hammer a remote agent.
const minConfigPoll = 100 * time.Millisecond

// maxGuards bounds the loop guards an agent keeps (tasks waiting for an
// answer); the least recently used goes first.
const maxGuards = 4096

// loopGuard counts one task's questions and repeated exchanges.
type loopGuard struct {
	rounds   int
	pending  [32]byte // the question waiting for its answer
	pendID   string   // its status message's id
	last     [32]byte // the last exchange
	repeats  int      // how many times in a row last happened
	hasQ     bool
	lastUsed int64
}

// guards are an agent's loop guards by task id. Safe for concurrent use
// (background follows run beside the agent's turns).
type guards struct {
	mu   sync.Mutex
	m    map[spec.TaskID]*loopGuard
	tick int64
}

func (g *guards) get(id spec.TaskID) *loopGuard {
	if g.m == nil {
		g.m = make(map[spec.TaskID]*loopGuard)
	}
	g.tick++
	lg := g.m[id]
	if lg == nil {
		if len(g.m) >= maxGuards {
			var oldest spec.TaskID
			var at int64 = -1
			for k, v := range g.m {
				if at < 0 || v.lastUsed < at {
					oldest, at = k, v.lastUsed
				}
			}
			delete(g.m, oldest)
		}
		lg = &loopGuard{}
		g.m[id] = lg
	}
	lg.lastUsed = g.tick
	return lg
}

// question records a question of task id and returns its round, or
// ErrTooManyRounds past maxRounds.
func (g *guards) question(id spec.TaskID, qID string, q []byte, maxRounds int) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	lg := g.get(id)
	lg.rounds++
	lg.pending, lg.pendID, lg.hasQ = sha256.Sum256(q), qID, true
	if lg.rounds > maxRounds {
		return lg.rounds, errs.Wrap(codes.ResourceExhausted, ErrTooManyRounds, "loop protection: the remote task asked question %d, over its limit of %d rounds (%s)", lg.rounds, maxRounds, ConfigMaxRounds)
	}
	return lg.rounds, nil
}

// answer records the answer to task id's pending question, if any, and
// returns the question's status message id, or ErrRepeatedExchange when
// the same question got the same answer maxRepeats times in a row.
func (g *guards) answer(id spec.TaskID, a []byte, maxRepeats int) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	lg := g.m[id]
	if lg == nil || !lg.hasQ {
		return "", nil
	}
	h := sha256.New()
	h.Write(lg.pending[:])
	h.Write(a)
	var ex [32]byte
	copy(ex[:], h.Sum(nil))
	if ex == lg.last {
		lg.repeats++
	} else {
		lg.last, lg.repeats = ex, 1
	}
	lg.hasQ = false
	if lg.repeats >= maxRepeats {
		return lg.pendID, errs.Wrap(codes.ResourceExhausted, ErrRepeatedExchange, "loop protection: the same question got the same answer %d times in a row (%s %d)", lg.repeats, ConfigMaxRepeats, maxRepeats)
	}
	return lg.pendID, nil
}

// done forgets task id.
func (g *guards) done(id spec.TaskID) {
	g.mu.Lock()
	delete(g.m, id)
	g.mu.Unlock()
}

// exchangeBytes is what identifies a question or an answer: its text and
// data.
func exchangeBytes(text string, data []byte) []byte {
	b := make([]byte, 0, len(text)+len(data)+1)
	b = append(b, text...)
	b = append(b, 0)
	return append(b, data...)
}

// settled reports whether a remote task in state st needs no more
// following: terminal, or waiting for its caller.
func settled(st spec.TaskState) bool {
	return st.Terminal() || st == spec.TaskStateInputRequired || st == spec.TaskStateAuthRequired
}

// settled reports whether res needs no more following. A task that still
// shows the question just answered (a remote that answers before it
// took the answer up) has not settled.
func (res *remoteResult) settled() bool {
	if res.state == spec.TaskStateInputRequired && res.answered != "" && res.status != nil && res.status.ID == res.answered {
		return false
	}
	return settled(res.state)
}

// follow follows res's remote task until it settles or ctx ends, pushing
// its updates with push.
func (r *remote) follow(ctx context.Context, res *remoteResult, push func(*grain.Message)) error {
	if res.taskID == "" || res.settled() || (res.message != nil && res.state == "") {
		return nil
	}
	ctx, span := r.tracer.Start(ctx, "a2a follow", res.taskID, res.contextID)
	defer span.End()
	if r.card.Capabilities.Streaming {
		for ev, err := range r.client.SubscribeToTask(ctx, &spec.SubscribeToTaskRequest{ID: res.taskID}) {
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				r.h.Logger().DebugContext(ctx, "a2a: resubscribing to the remote task failed: polling it", "task", res.taskID, "err", err)
				break
			}
			res.apply(ev, push)
			if res.settled() {
				return nil
			}
		}
		r.metrics.resubscribes.Inc()
	}
	b := retry.New(r.set.pollMin, r.set.pollMax, r.set.clk)
	lastStatus := ""
	for {
		if !b.Wait(ctx, nil) {
			return ctx.Err()
		}
		r.metrics.polls.Inc()
		t, err := r.client.GetTask(ctx, &spec.GetTaskRequest{ID: res.taskID})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if c := errs.Code(remoteError(err)); c != codes.Unavailable && c != codes.Internal {
				return err
			}
			r.h.Logger().DebugContext(ctx, "a2a: polling the remote task", "task", res.taskID, "err", err)
			continue
		}
		res.apply(t, nil)
		if m := t.Status.Message; m != nil && !res.settled() {
			if id := m.ID + textOf(m.Parts); id != lastStatus {
				lastStatus = id
				p := fromParts(m.Parts)
				p.MessageType = TypeProgress
				push(p)
			}
		}
		if res.settled() {
			return nil
		}
	}
}
