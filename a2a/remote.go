package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
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
)

// RemoteOptions configures the A2A agent type.
type RemoteOptions struct {
	// AllowPrivateNetworks lets remote agents be on loopback, private and
	// link-local addresses. Default: refused (the SSRF guard).
	AllowPrivateNetworks bool
}

// RegisterRemote registers RemoteType in reg.
func RegisterRemote(reg *grain.Registry, opts RemoteOptions) error {
	base := outgoingTransport(opts.AllowPrivateNetworks)
	return reg.Register(RemoteType, func(h grain.Host) (grain.Agent, error) {
		return &remote{h: h, base: base}, nil
	}, grain.TypeInfo{
		Description: "A remote A2A agent: its configuration (card_url, and api_key, bearer_token or header.* credentials) names it; a message asked of it is sent to it, its streamed updates are pushed to the caller, its result is the reply.",
		Skills: []grain.Skill{{
			Name:        "a2a-proxy",
			Description: "Forward a message to the configured A2A agent and reply with its result; contextId and task id travel in the state (a2a.context_id, a2a.task_id).",
			Tags:        []string{"a2a", "proxy"},
		}},
	})
}

// remote is an agent of RemoteType. Its turns run one at a time, so its
// client needs no lock.
type remote struct {
	h      grain.Host
	base   http.RoundTripper
	client *a2aclient.Client
	card   *spec.AgentCard
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
	for k, v := range cfg {
		if name, ok := strings.CutPrefix(k, ConfigHeaderPrefix); ok && name != "" {
			headers.Set(name, v)
		}
	}
	hc := &http.Client{
		Transport: &headerTransport{base: r.base, headers: headers},
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
		Client:     &http.Client{Transport: &limitTransport{base: hc.Transport, max: 1 << 20}, CheckRedirect: hc.CheckRedirect, Timeout: 30 * time.Second},
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
	if r.client != nil {
		r.client.Destroy()
	}
}

// OnMessage implements grain.Agent: the message goes to the remote agent
// (streaming, if its card says it streams); status messages and artifact
// chunks it streams are pushed to the caller (TypeProgress, TypeArtifact)
// as they come; the reply is the result's text and data, its state the
// remote contextId, task id and task state. An input-required result is a
// reply of TypeInputRequired (TypeAuthRequired): Ask again with its state
// to answer. A failed task is Unknown, a rejected one FailedPrecondition,
// a canceled one Canceled, each with the remote status message.
func (r *remote) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	msg := spec.NewMessage(spec.MessageRoleUser, toParts(m)...)
	msg.ContextID = m.GetState()[StateContextID]
	msg.TaskID = spec.TaskID(m.GetState()[StateTaskID])
	req := &spec.SendMessageRequest{Message: msg}
	res := &remoteResult{}
	push := func(p *grain.Message) {
		if m.GetKind() != grain.KindRequest || m.GetFrom() == "" {
			return
		}
		if err := r.h.Send(ctx, m.GetFrom(), p); err != nil {
			r.h.Logger().DebugContext(ctx, "a2a: push to the caller", "err", err)
		}
	}
	var err error
	if r.card.Capabilities.Streaming {
		for ev, e := range r.client.SendStreamingMessage(ctx, req) {
			if e != nil {
				err = e
				break
			}
			res.apply(ev, push)
		}
	} else {
		var out spec.SendMessageResult
		if out, err = r.client.SendMessage(ctx, req); err == nil {
			res.apply(out, func(*grain.Message) {})
		}
	}
	if err != nil {
		if ctx.Err() != nil && res.taskID != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.client.CancelTask(cctx, &spec.CancelTaskRequest{ID: res.taskID})
			cancel()
		}
		return nil, remoteError(err)
	}
	return res.reply(m)
}

// remoteResult gathers a remote execution's events.
type remoteResult struct {
	taskID    spec.TaskID
	contextID string
	state     spec.TaskState
	status    *spec.Message
	message   *spec.Message // a message result
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
	r.State = map[string]string{StateContextID: res.contextID}
	if res.taskID != "" {
		r.State[StateTaskID] = string(res.taskID)
		r.State[StateTaskState] = string(res.state)
	}
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
// as files.
func fromParts(parts spec.ContentParts) *grain.Message {
	out := &grain.Message{Message: textOf(parts)}
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
	case errors.Is(err, spec.ErrUnauthenticated):
		code = codes.Unauthenticated
	case errors.Is(err, spec.ErrUnauthorized):
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
