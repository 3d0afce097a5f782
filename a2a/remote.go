package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/outbound"
	"github.com/agentsilo/agentsilo/internal/retry"
)

// RemoteType is the built-in agent type whose agents are A2A agents
// outside the cluster (or in another one): an agent of it, configured by
// CreateAgent, forwards what it is asked to its remote agent and replies
// with the result, so any agent or client Asks, say, A2A:system:weather
// like any other agent.
const RemoteType = "A2A"

// The configuration keys of an agent of RemoteType (CreateAgent's config).
const (
	// ConfigCardURL is the remote agent's card: its URL
	// (https://host/.well-known/agent-card.json, or any path ending in
	// .json) or the agent's base URL (the well-known path is added).
	ConfigCardURL = "card_url"
	// ConfigAPIKey is sent as the x-api-key header.
	ConfigAPIKey = "api_key"
	// ConfigBearerToken is sent as "Authorization: Bearer <token>".
	ConfigBearerToken = "bearer_token"
	// ConfigHeaderPrefix starts keys of further headers: header.X-Tenant=acme.
	ConfigHeaderPrefix = "header."
	// ConfigTransport prefers a transport of the card: JSONRPC or HTTP+JSON.
	ConfigTransport = "transport"
	// ConfigDelegate "true" sends, with every request, a token the cluster
	// signs for the user the call is made for (its on-behalf-of
	// principal), with the remote agent's origin (scheme://host[:port] of
	// card_url) as its audience and the agent as its actor, as
	// "Authorization: Bearer" (instead of bearer_token): the remote agent
	// verifies it with the keys the cluster publishes
	// (RemoteOptions.Delegate; the silo's --delegation-key). Without it
	// the silo refuses the agent's calls (FailedPrecondition). The token
	// carries the scopes of the skill called, and no others (see
	// ConfigScopesPrefix).
	ConfigDelegate = "delegate"
	// ConfigScopesPrefix starts keys that declare the scopes a delegated
	// token carries for a call of a skill of the remote agent:
	// scopes.transfer="payments:write". The skill called is the Ask's
	// message type (a skill's id or name on the card), or the card's one
	// skill for an Ask without one. Without such a key the scopes are
	// those the directory's entry declares for the skill
	// (RemoteOptions.SkillScopes), else those of the skill's first
	// security requirement on the card; a call of no known skill carries
	// none.
	ConfigScopesPrefix = "scopes."
)

// MetaIdempotencyKey is the key, in the metadata of the message an agent
// of RemoteType sends for an Ask with an idempotency key, of that key; the
// message's id is the key too. A message sent again under the same key (a
// retry after a crash) is one the remote agent may take once.
const MetaIdempotencyKey = "agentsilo.idempotency_key"

// RemoteOptions configures the A2A agent type.
type RemoteOptions struct {
	// AllowPrivateNetworks lets remote agents be on loopback, private and
	// link-local addresses. Default: refused (the SSRF guard).
	AllowPrivateNetworks bool
	// Resolve, if set, gives the endpoint of an agent A2A:owner:alias that
	// has no configuration of its own (never created with CreateAgent):
	// its card URL (or base URL) and the headers to send with every
	// request. ok false (with a nil error) means it knows no such agent,
	// and the Ask fails as without Resolve (FailedPrecondition); an error
	// fails the Ask with the error's code. It may be called concurrently.
	Resolve func(ctx context.Context, owner, alias string) (url string, headers map[string]string, ok bool, err error)

	// PollMin and PollMax bound the waits between polls of a remote task
	// that is not done (when its stream cannot be resubscribed): the first
	// wait is PollMin, each next one doubles up to PollMax, each jittered
	// by 20%. Defaults: 2 s and 30 s. An agent's poll_min and poll_max
	// configuration keys override them.
	PollMin, PollMax time.Duration
	// MaxRounds is the most input-required questions a remote task may
	// ask before it is cancelled with ErrTooManyRounds. Default: 20. An
	// agent's max_rounds configuration key overrides it.
	MaxRounds int
	// MaxRepeats is how many times in a row a question may get the same
	// answer before the task is cancelled with ErrRepeatedExchange.
	// Default: 3. An agent's max_repeats configuration key overrides it.
	MaxRepeats int
	// FollowCheck is the period of the durable reminder that resumes
	// background follows on whichever silo hosts the agent (after the
	// silo that followed them died). It must be at least the silo's
	// minimum reminder period. Default: 1 min.
	FollowCheck time.Duration
	// MaxFollow bounds how long a task is followed in the background,
	// from the Ask that started it: past it the remote task is cancelled
	// and the caller gets DeadlineExceeded as the result. Default: 24 h.
	MaxFollow time.Duration
	// Metrics, if set, gets the type's counters (see observe.go).
	Metrics prometheus.Registerer
	// TracerProvider makes the type's spans (nil: the global one).
	TracerProvider trace.TracerProvider
	// Delegate, if set, makes the token an agent configured with
	// ConfigDelegate sends for the principal its call is made for, to
	// audience, as actor, with the scopes of the skill called
	// (auth.Delegator.Token). It may be called concurrently.
	Delegate func(principal, audience, actor string, scopes []string) (string, error)
	// SkillScopes, if set, gives the scopes a delegated token carries for
	// a call of skill of an agent A2A:owner:alias that Resolve gave (the
	// directory entry's pinned skills); ok false: it declares none, and
	// the card's security requirements hold. It may be called
	// concurrently.
	SkillScopes func(ctx context.Context, owner, alias, skill string) (scopes []string, ok bool)

	// clk times polls (nil: the real clock); only tests replace it
	// (export_test.go).
	clk clock.Clock
}

// remoteShared is what every agent of RemoteType of one registration
// shares.
type remoteShared struct {
	base      http.RoundTripper
	resolve   func(ctx context.Context, owner, alias string) (string, map[string]string, bool, error)
	set       followSettings
	check     time.Duration
	maxFollow time.Duration
	metrics   *remoteMetrics
	tracer    remoteTracer
	delegate  func(principal, audience, actor string, scopes []string) (string, error)
	scopesOf  func(ctx context.Context, owner, alias, skill string) ([]string, bool)
}

// RegisterRemote registers RemoteType in reg.
func RegisterRemote(reg *grain.Registry, opts RemoteOptions) error {
	sh := &remoteShared{
		base:     traceTransport{base: outbound.Transport(opts.AllowPrivateNetworks)},
		resolve:  opts.Resolve,
		set:      opts.settings(),
		check:    opts.FollowCheck,
		metrics:  newRemoteMetrics(opts.Metrics),
		tracer:   newRemoteTracer(opts.TracerProvider),
		delegate: opts.Delegate,
		scopesOf: opts.SkillScopes,
	}
	if sh.check <= 0 {
		sh.check = time.Minute
	}
	if sh.maxFollow = opts.MaxFollow; sh.maxFollow <= 0 {
		sh.maxFollow = 24 * time.Hour
	}
	return reg.Register(RemoteType, func(h grain.Host) (grain.Agent, error) {
		return &remote{h: h, remoteShared: sh}, nil
	}, grain.TypeInfo{
		Description: "A remote A2A agent: its configuration (card_url, and api_key, bearer_token or header.* credentials) names it; a message asked of it is sent to it, its streamed updates are pushed to the caller, its result is the reply; a task that runs long is followed (in the background with state a2a.follow=background), questions it asks come back to the caller, loops are cut.",
		Skills: []grain.Skill{{
			Name:        "a2a-proxy",
			Description: "Forward a message to the configured A2A agent and reply with its result; the remote contextId and task id travel in the state (a2a.remote_context_id, a2a.remote_task_id; also a2a.context_id, a2a.task_id on replies and on messages that do not come through an A2A server).",
			Tags:        []string{"a2a", "proxy"},
		}},
	})
}

// remote is an agent of RemoteType. Its turns run one at a time; its
// background follows run beside them, and share its client (which is
// safe for concurrent use once made) and its guards (which lock).
type remote struct {
	h grain.Host
	*remoteShared
	client *a2aclient.Client
	card   *spec.AgentCard
	set    followSettings // the shared settings with the agent's configuration
	guards guards
	bg     *background // nil until a background follow runs
	// delegates: the agent sends delegated tokens (ConfigDelegate), with
	// the scopes its configuration declares per skill (scopes), or the
	// directory's for an agent Resolve gave (resolved).
	delegates bool
	scopes    map[string][]string
	resolved  bool
}

// connect resolves the configured card and makes the client, once per
// activation.
func (r *remote) connect(ctx context.Context) error {
	if r.client != nil {
		return nil
	}
	cfg, err := r.h.Config(ctx)
	if err != nil {
		return err
	}
	if len(cfg) == 0 && r.resolve != nil {
		u, hdrs, ok, err := r.resolve(ctx, r.h.Address().Owner, r.h.Address().Alias)
		if err != nil {
			return errs.Wrap(errs.Code(err), err, "%s: resolve", r.h.Address())
		}
		if ok {
			cfg = map[string]string{ConfigCardURL: u}
			for k, v := range hdrs {
				cfg[ConfigHeaderPrefix+k] = v
			}
			r.resolved = true
		}
	}
	r.set = r.remoteShared.set
	if r.set, err = r.set.withConfig(r.h.Address(), cfg); err != nil {
		return err
	}
	raw := cfg[ConfigCardURL]
	if raw == "" {
		return errs.New(codes.FailedPrecondition, "%s has no %s: create it with its remote agent's card URL (CreateAgent %s=https://host/.well-known/agent-card.json)", r.h.Address(), ConfigCardURL, ConfigCardURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errs.New(codes.FailedPrecondition, "%s: %s %q: want http(s)://host/...", r.h.Address(), ConfigCardURL, clipString(raw))
	}
	headers := http.Header{}
	if k := cfg[ConfigAPIKey]; k != "" {
		headers.Set("X-Api-Key", k)
	}
	if t := cfg[ConfigBearerToken]; t != "" {
		headers.Set("Authorization", "Bearer "+t)
	}
	r.scopes = map[string][]string{}
	for k, v := range cfg {
		if name, ok := strings.CutPrefix(k, ConfigHeaderPrefix); ok && name != "" {
			headers.Set(name, v)
		}
		if skill, ok := strings.CutPrefix(k, ConfigScopesPrefix); ok && skill != "" {
			r.scopes[skill] = strings.Fields(v)
		}
	}
	var tr http.RoundTripper = &outbound.Headers{Base: r.base, Header: headers}
	if cfg[ConfigDelegate] == "true" {
		if r.delegate == nil {
			return errs.New(codes.FailedPrecondition, "%s: %s=true, but this silo signs no tokens on a user's behalf (--delegation-key, --delegation-issuer)", r.h.Address(), ConfigDelegate)
		}
		headers.Del("Authorization") // the user's token, not a configured one
		r.delegates = true
		tr = delegating{base: tr, delegate: r.delegate, audience: u.Scheme + "://" + u.Host, actor: r.h.Address().String()}
	}
	hc := &http.Client{
		Transport: tr,
		// Credentials go to the configured host only.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 || req.URL.Host != via[0].URL.Host {
				return errors.New("a2a: redirect to another host refused")
			}
			return nil
		},
	}
	path := "/.well-known/agent-card.json"
	if strings.HasSuffix(u.Path, ".json") {
		path, u.Path, u.RawPath = u.Path, "", ""
	}
	res := &agentcard.Resolver{
		Client:     &http.Client{Transport: &outbound.LimitBody{Base: hc.Transport, Max: 1 << 20}, CheckRedirect: hc.CheckRedirect, Timeout: 30 * time.Second},
		CardParser: agentcard.Parser(a2av0.NewAgentCardParser()),
	}
	card, err := res.Resolve(ctx, u.String(), agentcard.WithPath(path))
	if err != nil {
		return errs.Wrap(codes.Unavailable, err, "%s: agent card %s", r.h.Address(), clipString(raw))
	}
	var prefs []spec.TransportProtocol
	if t := cfg[ConfigTransport]; t != "" {
		prefs = []spec.TransportProtocol{spec.TransportProtocol(t)}
	}
	cl, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(hc),
		a2aclient.WithRESTTransport(hc),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: prefs}),
	)
	if err != nil {
		return errs.Wrap(codes.FailedPrecondition, err, "%s: no transport of the card at %s", r.h.Address(), clipString(raw))
	}
	r.client, r.card = cl, card
	return nil
}

// OnDeactivate implements grain.Deactivator.
func (r *remote) OnDeactivate(context.Context, grain.Reason) {
	r.stopBackground()
	if r.client != nil {
		r.client.Destroy()
	}
}

// OnMessage implements grain.Agent: the message goes to the remote agent
// (streaming, if its card says it streams); status messages and artifact
// chunks it streams are pushed to the caller (TypeProgress, TypeArtifact)
// as they come; a task that is not done when the answer comes is followed
// (see follow.go) within the Ask's deadline, or in the background with
// StateFollow; the reply is the result's text and data, its state the
// remote contextId, task id and task state. An input-required result is a
// reply of TypeInputRequired (TypeAuthRequired): Ask again with its state
// to answer; or, with StateQuestions, an Ask of the caller. A failed task
// is Unknown, a rejected one FailedPrecondition, a canceled one Canceled,
// each with the remote status message; a task cut by loop protection is
// ResourceExhausted (ErrTooManyRounds, ErrRepeatedExchange).
func (r *remote) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	ctx = withPrincipal(ctx, m.OnBehalfOf, nil)
	if m.MessageType == typeFollowTick {
		return nil, r.resume(ctx)
	}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	if r.delegates {
		ctx = withPrincipal(ctx, m.OnBehalfOf, r.skillScopes(ctx, m.MessageType))
	}
	st := m.State
	taskID, contextID := remoteIDs(st)
	if m.MessageType == TypeCancel {
		return r.cancel(ctx, m, taskID)
	}
	ctx = withMessageTrace(ctx)
	ctx, span := r.tracer.Start(ctx, "a2a remote", taskID, contextID, attribute.String("agentsilo.correlation_id", m.ID))
	defer span.End()
	answered := ""
	if taskID != "" {
		// The answer to the task's question, if it asked one.
		var err error
		if answered, err = r.guards.answer(taskID, exchangeBytes(m.Message, m.Data), r.set.maxRepeats); err != nil {
			r.loopBreak(ctx, taskID, "repeats")
			return nil, err
		}
	}
	msg := spec.NewMessage(spec.MessageRoleUser, toParts(m)...)
	msg.ContextID = contextID
	msg.TaskID = taskID
	if k := m.IdempotencyKey; k != "" {
		// A message sent again under the same key (a retry after a
		// crash) is the same message to the remote agent.
		msg.ID = k
		msg.SetMeta(MetaIdempotencyKey, k)
	}
	if st[StateFollow] == FollowBackground {
		return r.startBackground(ctx, m, msg)
	}
	push := func(p *grain.Message) {
		if m.Kind != grain.KindRequest || m.From == "" {
			return
		}
		if err := r.h.Send(ctx, m.From, p); err != nil {
			r.h.Logger().DebugContext(ctx, "a2a: push to the caller", "err", err)
		}
	}
	res, err := r.exchange(ctx, msg, answered, push)
	for err == nil && res.state == spec.TaskStateInputRequired {
		var round int
		if round, err = r.question(ctx, res); err != nil {
			break
		}
		if st[StateQuestions] != QuestionsAsk || m.Kind != grain.KindRequest || m.From == "" {
			break // the reply asks the question
		}
		var ans *grain.Message
		if ans, err = r.askCaller(ctx, m.From, res, round); err != nil {
			r.cancelRemote(ctx, res.taskID)
			break
		}
		var asked string
		if asked, err = r.guards.answer(res.taskID, exchangeBytes(ans.Message, ans.Data), r.set.maxRepeats); err != nil {
			r.loopBreak(ctx, res.taskID, "repeats")
			break
		}
		next := spec.NewMessage(spec.MessageRoleUser, toParts(ans)...)
		next.ContextID, next.TaskID = res.contextID, res.taskID
		res, err = r.exchange(ctx, next, asked, push)
	}
	if err != nil {
		if res != nil && res.taskID != "" && ctx.Err() != nil {
			r.cancelRemote(ctx, res.taskID)
		}
		if _, ok := err.(*errs.Error); ok {
			return nil, err // ours: loop protection, the caller's answer
		}
		return nil, remoteError(err)
	}
	if res.state.Terminal() {
		r.guards.done(res.taskID)
	}
	return res.reply(m)
}

// remoteIDs are the remote task and context a message to the agent
// continues (empty: a new task, in a new context): StateRemoteTaskID and
// StateRemoteContextID if set, else StateTaskID and StateContextID unless
// those are the ids of the A2A task of this server that the message came
// through (StateInbound), which the remote agent does not know.
func remoteIDs(st map[string]string) (spec.TaskID, string) {
	if st[StateRemoteTaskID] != "" || st[StateRemoteContextID] != "" {
		return spec.TaskID(st[StateRemoteTaskID]), st[StateRemoteContextID]
	}
	if st[StateInbound] != "" {
		return "", ""
	}
	return spec.TaskID(st[StateTaskID]), st[StateContextID]
}

// remoteState is the state of a reply about remote task id in context
// contextID, in state ts: its ids under both pairs of keys (see
// StateRemoteTaskID).
func remoteState(contextID string, id spec.TaskID, ts spec.TaskState) map[string]string {
	st := map[string]string{StateContextID: contextID, StateRemoteContextID: contextID}
	if id != "" {
		st[StateTaskID], st[StateRemoteTaskID], st[StateTaskState] = string(id), string(id), string(ts)
	}
	return st
}

// cancel cancels the remote task id (a message of TypeCancel) and
// replies with its state; a background follow of it then delivers the
// cancellation as its result.
func (r *remote) cancel(ctx context.Context, m *grain.Message, id spec.TaskID) (*grain.Message, error) {
	if id == "" {
		return nil, errs.New(codes.InvalidArgument, "%s: %s needs the remote task's id in the state (%s, or %s on a message that did not come through an A2A server)", r.h.Address(), TypeCancel, StateRemoteTaskID, StateTaskID)
	}
	t, err := r.client.CancelTask(ctx, &spec.CancelTaskRequest{ID: id})
	if err != nil {
		return nil, remoteError(err)
	}
	r.guards.done(id)
	reply := m.Response()
	reply.State = remoteState(t.ContextID, t.ID, t.Status.State)
	return reply, nil
}

// exchange sends msg to the remote agent and follows the task it starts
// or continues until it settles; the result is never nil.
func (r *remote) exchange(ctx context.Context, msg *spec.Message, answered string, push func(*grain.Message)) (*remoteResult, error) {
	req := &spec.SendMessageRequest{Message: msg}
	var wait *retry.Backoff
	for attempt := 1; ; attempt++ {
		res := &remoteResult{taskID: msg.TaskID, contextID: msg.ContextID, answered: answered}
		events := 0
		var err error
		if r.card.Capabilities.Streaming {
			for ev, e := range r.client.SendStreamingMessage(ctx, req) {
				if e != nil {
					err = e
					break
				}
				events++
				res.apply(ev, push)
			}
		} else {
			var out spec.SendMessageResult
			if out, err = r.client.SendMessage(ctx, req); err == nil {
				res.apply(out, func(*grain.Message) {})
			}
		}
		if err == nil {
			return res, r.follow(ctx, res, push)
		}
		// A remote still closing the task's previous turn refuses the
		// next message; it takes it a moment later.
		if msg.TaskID == "" || events > 0 || attempt == maxBusyRetries || !busy(err) || ctx.Err() != nil {
			return res, err
		}
		if wait == nil {
			wait = retry.New(r.set.pollMin, r.set.pollMax, r.set.clk)
		}
		r.h.Logger().DebugContext(ctx, "a2a: the remote task is busy with its previous turn: sending again", "task", msg.TaskID, "attempt", attempt)
		if !wait.Wait(ctx, nil) {
			return res, err
		}
	}
}

// maxBusyRetries bounds the sends of one message to a busy task.
const maxBusyRetries = 5

// busy reports whether err is a remote's refusal of a message because the
// task's previous turn is still running (the official SDK's "task
// execution is already in progress"): nothing was done, so sending the
// message again is safe.
func busy(err error) bool {
	return strings.Contains(err.Error(), "execution is already in progress")
}

// question counts the input-required question res holds; over the round
// limit it cancels the remote task.
func (r *remote) question(ctx context.Context, res *remoteResult) (int, error) {
	r.metrics.questions.Inc()
	var q *grain.Message
	if res.status != nil {
		q = fromParts(res.status.Parts)
	} else {
		q = &grain.Message{}
	}
	qid := ""
	if res.status != nil {
		qid = res.status.ID
	}
	round, err := r.guards.question(res.taskID, qid, exchangeBytes(q.Message, q.Data), r.set.maxRounds)
	if err != nil {
		r.loopBreak(ctx, res.taskID, "rounds")
	}
	return round, err
}

// askCaller asks the calling agent the question of res and returns its
// answer.
func (r *remote) askCaller(ctx context.Context, caller string, res *remoteResult, round int) (*grain.Message, error) {
	ctx, span := r.tracer.Start(ctx, "a2a question", res.taskID, res.contextID, attribute.Int("a2a.round", round))
	defer span.End()
	q := &grain.Message{}
	if res.status != nil {
		q = fromParts(res.status.Parts)
	}
	q.MessageType = TypeInputRequired
	q.State = remoteState(res.contextID, res.taskID, res.state)
	q.State[StateRound] = strconv.Itoa(round)
	ans, err := r.h.Ask(ctx, caller, q)
	if err != nil {
		return nil, errs.Wrap(errs.Code(err), err, "the caller did not answer question %d of remote task %s", round, res.taskID)
	}
	return ans, nil
}

// loopBreak counts a loop protection's cut and cancels the remote task.
func (r *remote) loopBreak(ctx context.Context, id spec.TaskID, limit string) {
	r.metrics.loopBreaks.WithLabelValues(limit).Inc()
	trace.SpanFromContext(ctx).AddEvent("a2a loop break", trace.WithAttributes(attribute.String("a2a.limit", limit)))
	r.h.Logger().InfoContext(ctx, "a2a: loop protection ended a remote task", "task", id, "limit", limit)
	r.guards.done(id)
	r.cancelRemote(ctx, id)
}

// cancelRemote cancels remote task id, best effort, past ctx's end.
func (r *remote) cancelRemote(ctx context.Context, id spec.TaskID) {
	if id == "" || r.client == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := r.client.CancelTask(cctx, &spec.CancelTaskRequest{ID: id}); err != nil {
		r.h.Logger().DebugContext(ctx, "a2a: cancelling the remote task", "task", id, "err", err)
	}
}

// withMessageTrace returns ctx, a turn's, in the trace its message
// carries, unless ctx has a span already.
func withMessageTrace(ctx context.Context) context.Context {
	tp := grain.Traceparent(ctx)
	if trace.SpanContextFromContext(ctx).IsValid() || tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// remoteResult gathers a remote execution's events.
type remoteResult struct {
	taskID    spec.TaskID
	contextID string
	state     spec.TaskState
	status    *spec.Message
	message   *spec.Message // a message result
	answered  string        // the status message of the question answered, if any
	artifacts []*spec.Artifact
}

func (res *remoteResult) apply(ev spec.Event, push func(*grain.Message)) {
	switch v := ev.(type) {
	case *spec.Message:
		res.message, res.contextID = v, v.ContextID
	case *spec.Task:
		res.taskID, res.contextID, res.state, res.status = v.ID, v.ContextID, v.Status.State, v.Status.Message
		res.artifacts = v.Artifacts
	case *spec.TaskStatusUpdateEvent:
		res.taskID, res.contextID, res.state, res.status = v.TaskID, v.ContextID, v.Status.State, v.Status.Message
		if v.Status.Message != nil && !isFinal(v) {
			p := fromParts(v.Status.Message.Parts)
			p.MessageType = TypeProgress
			push(p)
		}
	case *spec.TaskArtifactUpdateEvent:
		res.taskID, res.contextID = v.TaskID, v.ContextID
		if v.Artifact == nil {
			return
		}
		a := res.artifact(v.Artifact.ID)
		if a == nil || !v.Append {
			cp := *v.Artifact
			if a == nil {
				res.artifacts = append(res.artifacts, &cp)
			} else {
				*a = cp
			}
		} else {
			a.Parts = append(a.Parts, v.Artifact.Parts...)
		}
		p := fromParts(v.Artifact.Parts)
		p.MessageType = TypeArtifact
		p.State = map[string]string{StateArtifactID: string(v.Artifact.ID)}
		push(p)
	}
}

func (res *remoteResult) artifact(id spec.ArtifactID) *spec.Artifact {
	for _, a := range res.artifacts {
		if a.ID == id {
			return a
		}
	}
	return nil
}

// reply makes the agent's reply to m of the result.
func (res *remoteResult) reply(m *grain.Message) (*grain.Message, error) {
	var parts spec.ContentParts
	switch {
	case res.message != nil:
		parts = res.message.Parts
	case len(res.artifacts) > 0 && res.state == spec.TaskStateCompleted:
		for _, a := range res.artifacts {
			parts = append(parts, a.Parts...)
		}
	case res.status != nil:
		parts = res.status.Parts
	}
	out := fromParts(parts)
	r := m.Response()
	r.Message, r.Data, r.DataType, r.Files = out.Message, out.Data, out.DataType, out.Files
	r.Label, r.Outside = out.Label, out.Outside
	r.State = remoteState(res.contextID, res.taskID, res.state)
	why := func() string {
		if t := textOf(parts); t != "" {
			return t
		}
		return string(res.state)
	}
	switch res.state {
	case spec.TaskStateUnspecified, spec.TaskStateCompleted:
		if res.message == nil && res.taskID == "" {
			return nil, errs.New(codes.Unknown, "the remote agent sent no result")
		}
	case spec.TaskStateInputRequired:
		r.MessageType = TypeInputRequired
	case spec.TaskStateAuthRequired:
		r.MessageType = TypeAuthRequired
	case spec.TaskStateRejected:
		return nil, errs.New(codes.FailedPrecondition, "the remote agent rejected the task: %s", why())
	case spec.TaskStateCanceled:
		return nil, errs.New(codes.Canceled, "the remote task was canceled: %s", why())
	case spec.TaskStateFailed:
		return nil, errs.New(codes.Unknown, "the remote task failed: %s", why())
	default:
		return nil, errs.New(codes.Unknown, "the remote task ended in state %s", res.state)
	}
	return r, nil
}

// fromParts is the agentsilo message of A2A parts: the text parts joined,
// the first data part as JSON (else the first raw part) as data, URL parts
// as files. It is an agent-message from outside the cluster, or the lower
// label its parts' metadata claim.
func fromParts(parts spec.ContentParts) *grain.Message {
	claim, _ := partsLabel(parts)
	out := &grain.Message{Message: textOf(parts), Label: grain.LabelAgentMessage.Lower(claim), Outside: true}
	for _, p := range parts {
		if p == nil {
			continue
		}
		switch c := p.Content.(type) {
		case spec.Data:
			if out.Data == nil {
				if b, err := json.Marshal(c.Value); err == nil {
					out.Data, out.DataType = b, "application/json"
				}
			}
		case spec.Raw:
			if out.Data == nil {
				out.Data, out.DataType = []byte(c), p.MediaType
			}
		case spec.URL:
			out.Files = append(out.Files, string(c))
		}
	}
	return out
}

// httpStatusError reports whether err is the SDK's JSON-RPC client
// reporting an answer of HTTP status code (it reads no body of a non-200
// answer, so a 401 carries no A2A error, only its status in the text).
func httpStatusError(err error, code int) bool {
	return strings.Contains(err.Error(), fmt.Sprintf("unexpected HTTP status: %d ", code))
}

// remoteError gives a failed call to a remote agent its code.
func remoteError(err error) error {
	code := codes.Unavailable
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, spec.ErrTaskNotFound):
		code = codes.NotFound
	case errors.Is(err, spec.ErrUnauthenticated), httpStatusError(err, http.StatusUnauthorized):
		code = codes.Unauthenticated
	case errors.Is(err, spec.ErrUnauthorized), httpStatusError(err, http.StatusForbidden):
		code = codes.PermissionDenied
	case errors.Is(err, spec.ErrInvalidParams), errors.Is(err, spec.ErrInvalidRequest), errors.Is(err, spec.ErrParseError), errors.Is(err, spec.ErrTaskNotCancelable):
		code = codes.InvalidArgument
	case errors.Is(err, spec.ErrUnsupportedOperation), errors.Is(err, spec.ErrMethodNotFound), errors.Is(err, spec.ErrUnsupportedContentType):
		code = codes.Unimplemented
	case errors.Is(err, spec.ErrInternalError), errors.Is(err, spec.ErrInvalidAgentResponse):
		code = codes.Internal
	}
	return errs.Wrap(code, err, "remote A2A agent")
}

// skillScopes are the scopes a delegated token carries for a call of
// skill (an Ask's message type; "" for the card's one skill): see
// ConfigScopesPrefix.
func (r *remote) skillScopes(ctx context.Context, skill string) []string {
	var onCard *spec.AgentSkill
	for i := range r.card.Skills {
		if sk := &r.card.Skills[i]; skill != "" && (sk.ID == skill || sk.Name == skill) || skill == "" && len(r.card.Skills) == 1 {
			onCard = sk
		}
	}
	names := []string{skill}
	if onCard != nil {
		names = []string{onCard.ID, onCard.Name}
	}
	for _, n := range names {
		if sc, ok := r.scopes[n]; ok && n != "" {
			return sc
		}
	}
	if r.resolved && r.scopesOf != nil {
		for _, n := range names {
			if sc, ok := r.scopesOf(ctx, r.h.Address().Owner, r.h.Address().Alias, n); ok && n != "" {
				return sc
			}
		}
	}
	if onCard == nil || len(onCard.SecurityRequirements) == 0 {
		return nil
	}
	return requirementScopes(onCard.SecurityRequirements[0])
}

// requirementScopes are the scopes of one security requirement of a card
// (the scopes of each of its schemes), sorted, each once.
func requirementScopes(req spec.SecurityRequirements) []string {
	var out []string
	for _, sc := range req {
		out = append(out, sc...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// principalKey is the context key of the principal a remote call is made
// for and the scopes of the skill it calls (withPrincipal).
type principalKey struct{}

// delegation is what a delegated token of a request says.
type delegation struct {
	principal string
	scopes    []string
}

// withPrincipal returns ctx naming principal as the user its requests to
// the remote agent are made for, with scopes, for a delegating transport.
func withPrincipal(ctx context.Context, principal string, scopes []string) context.Context {
	if principal == "" {
		return ctx
	}
	return context.WithValue(ctx, principalKey{}, delegation{principal, scopes})
}

// delegating is the transport of an agent configured with ConfigDelegate:
// each request carries a token the cluster signs for the principal its
// context names (a request made for nobody carries none; every request of
// an Ask or a follow is made for one).
type delegating struct {
	base            http.RoundTripper
	delegate        func(principal, audience, actor string, scopes []string) (string, error)
	audience, actor string
}

func (d delegating) RoundTrip(req *http.Request) (*http.Response, error) {
	p, _ := req.Context().Value(principalKey{}).(delegation)
	if p.principal == "" {
		return d.base.RoundTrip(req)
	}
	tok, err := d.delegate(p.principal, d.audience, d.actor, p.scopes)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	return d.base.RoundTrip(req)
}
