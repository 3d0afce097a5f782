package cluster

import (
	"context"
	"encoding/json"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/siloapi"
	"github.com/agentsilo/agentsilo/internal/tracing"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/reminders"
)

// peerHandler is what the silo does with what its peers send it: runtime
// messages of the placement protocol (release, swept, agents) and agents'
// messages forwarded to their owner here. It is the transport's Handler.
type peerHandler struct {
	r        *router
	rt       *grain.Runtime
	silo     siloapi.Runtime // rt's silo-only API
	tracer   tracing.Tracer  // the peer spans
	sessions *sessionRouter  // pushes to client sessions (sessions.go)
	rem      *reminders.Service
	declared *declaredTypes // the declared types (declared.go)
}

var (
	_ transport.AsyncHandler   = (*peerHandler)(nil)
	_ transport.OrderedHandler = (*peerHandler)(nil)
)

// HandleRequest implements transport.Handler.
func (h *peerHandler) HandleRequest(ctx context.Context, from string, env *transport.Envelope) (*agentsilov1.AgentMessage, error) {
	msg := env.GetMessage()
	if isSessionAddr(msg.GetTo()) {
		return h.session(ctx, from, env)
	}
	switch msg.GetMessageType() {
	case msgRelease:
		return nil, h.release(ctx, msg.GetTo(), env.GetViewVersion())
	case msgAgents:
		return h.agents(msg.GetMessage())
	case msgCount:
		return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, Message: strconv.Itoa(h.rt.Len())}, nil
	case msgTypes:
		return h.types()
	case msgDeclared:
		rev, err := strconv.ParseInt(msg.GetMessage(), 10, 64)
		if err != nil {
			return nil, errs.Wrap(codes.InvalidArgument, err, "declared types' revision %q", msg.GetMessage())
		}
		applied, err := h.declared.waitApplied(ctx, rev)
		if err != nil {
			return nil, err
		}
		return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, Message: strconv.FormatInt(applied, 10)}, nil
	case msgReminders:
		b, err := strconv.Atoi(msg.GetMessage())
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "reminder bucket %q: %w", msg.GetMessage(), err)
		}
		data, err := h.rem.Export(b)
		if err != nil {
			return nil, err
		}
		return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, Data: data}, nil
	case msgBroadcast:
		return h.broadcast(ctx, msg)
	case msgDeactivate:
		h.r.catchUp(ctx, env.GetViewVersion())
		a, err := grain.ParseAddress(msg.GetTo())
		if err != nil {
			return nil, err
		}
		active, err := h.rt.Deactivate(ctx, a)
		if err != nil || active {
			return nil, err
		}
		return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, Message: deactivateNotActive}, nil
	}
	if grain.IsReserved(msg.GetMessageType()) {
		return nil, errs.New(codes.InvalidArgument, "unknown runtime message %q from silo %s", msg.GetMessageType(), from)
	}
	h.r.catchUp(ctx, env.GetViewVersion())
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = h.tracer.Start(ctx, "peer Ask", trace.SpanKindServer, msg, attribute.String("agentsilo.from_silo", from))
		reply, err := h.silo.AskRemote(ctx, msg, int(env.GetHops()))
		tracing.End(span, err)
		return reply, err
	}
	return h.silo.AskRemote(ctx, msg, int(env.GetHops()))
}

// TryHandleRequest takes, without a goroutine of its own, a forwarded request
// for a live activation here (see siloapi.Runtime.TryAskRemote); everything
// else (runtime messages, a sender with a newer view, traced messages) goes
// to HandleRequest.
//
// A sender that routed with this silo's view found this silo the owner, as
// this silo would: the runtime does not look the owner up again. (The
// sender stamps the view it holds when it sends, which a view change right
// after its lookup can make newer than the one it routed with; the request
// then joins a live activation here that this silo's sweep of that view is
// about to deactivate, and follows it to its new owner, as the messages
// queued there do. Single activation rests on Claim and the sweep, not on
// this lookup.)
func (h *peerHandler) TryHandleRequest(ctx context.Context, _ string, env *transport.Envelope, reply func(*agentsilov1.AgentMessage, error)) bool {
	msg := env.GetMessage()
	version, sent := h.r.state.Load().view.Version, env.GetViewVersion()
	if msg.GetTraceparent() != "" || version < sent || isSessionAddr(msg.GetTo()) {
		return false
	}
	return h.silo.TryAskRemote(ctx, msg, int(env.GetHops()), version == sent, reply)
}

// PostRequest implements transport.OrderedHandler: a forwarded request takes
// its place in its receiver's mailbox in the order its sender sent it,
// behind the one-way messages and events sent before it. Runtime messages
// (release, listings) are not agents' messages: they run on a goroutine of
// their own, as HandleRequest.
func (h *peerHandler) PostRequest(ctx context.Context, from string, env *transport.Envelope, reply func(*agentsilov1.AgentMessage, error)) {
	msg := env.GetMessage()
	if isSessionAddr(msg.GetTo()) && !grain.IsReserved(msg.GetMessageType()) {
		// A push to a client session: delivered here at once, or handed
		// on from a goroutine of its own.
		h.sessions.receive(ctx, from, env, func(err error) { reply(nil, err) })
		return
	}
	if grain.IsReserved(msg.GetMessageType()) {
		go func() { reply(h.HandleRequest(ctx, from, env)) }()
		return
	}
	h.r.catchUp(ctx, env.GetViewVersion())
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = h.tracer.Start(ctx, "peer Ask", trace.SpanKindServer, msg, attribute.String("agentsilo.from_silo", from))
		inner := reply
		reply = func(m *agentsilov1.AgentMessage, err error) {
			tracing.End(span, err)
			inner(m, err)
		}
	}
	h.silo.AskRemoteAsync(ctx, msg, int(env.GetHops()), reply)
}

// HandleOneWay implements transport.Handler.
func (h *peerHandler) HandleOneWay(ctx context.Context, from string, env *transport.Envelope) {
	msg := env.GetMessage()
	switch msg.GetMessageType() {
	case msgSwept:
		h.r.noteSwept(from, env.GetViewVersion(), msg.GetMessage())
		return
	case msgSessionForget:
		h.sessions.keep.forget(from, msg.GetTo())
		return
	}
	h.r.catchUp(ctx, env.GetViewVersion())
	if msg.GetTraceparent() != "" {
		var span trace.Span
		ctx, span = h.tracer.Start(ctx, "peer "+tracing.KindName(msg.Kind), trace.SpanKindServer, msg, attribute.String("agentsilo.from_silo", from))
		defer span.End()
	}
	if err := h.silo.SendRemote(ctx, msg, int(env.GetHops())); err != nil {
		h.r.log.Debug("one-way message from a peer not delivered", "from", from, "to", msg.GetTo(), "err", err)
	}
}

// session answers a peer's request about a client session: a push (see
// sessionRouter.receive), or the registration or adoption of a session
// this silo is the fallback holder of, or the release of a session it
// holds.
func (h *peerHandler) session(ctx context.Context, from string, env *transport.Envelope) (*agentsilov1.AgentMessage, error) {
	msg := env.GetMessage()
	switch msg.GetMessageType() {
	case msgSessionRegister:
		h.r.catchUp(ctx, env.GetViewVersion())
		return nil, h.sessions.keep.register(from, msg.GetTo(), msg.GetMessage(), msg.GetData())
	case msgSessionAdopt:
		h.r.catchUp(ctx, env.GetViewVersion())
		return nil, h.sessions.keep.adopt(ctx, from, msg.GetTo(), msg.GetMessage(), msg.GetData())
	case msgSessionRelease:
		h.r.catchUp(ctx, env.GetViewVersion())
		return nil, h.sessions.keep.released(ctx, msg)
	}
	if grain.IsReserved(msg.GetMessageType()) {
		return nil, errs.New(codes.InvalidArgument, "unknown runtime message %q from silo %s", msg.GetMessageType(), from)
	}
	done := make(chan error, 1)
	h.sessions.receive(ctx, from, env, func(err error) { done <- err })
	return nil, <-done
}

// release deactivates key for the silo that owns it in view version: once
// this silo's view has caught up, so that it no longer routes key to itself.
func (h *peerHandler) release(ctx context.Context, key string, version int64) error {
	if err := h.r.waitVersion(ctx, version); err != nil {
		return errs.New(codes.Unavailable, "release %s: view %d not reached: %w", key, version, err)
	}
	if h.r.Route(key) == "" && h.r.state.Load().self {
		return errs.New(codes.FailedPrecondition, "%s is owned by %s in view %d", key, h.r.self, h.r.state.Load().view.Version)
	}
	return h.silo.Release(ctx, key)
}

// agents lists this silo's activations for a peer, as JSON in the reply.
func (h *peerHandler) agents(typeName string) (*agentsilov1.AgentMessage, error) {
	b, err := json.Marshal(activationInfos(h.rt.Activations(typeName)))
	if err != nil {
		return nil, errs.New(codes.Internal, "agents: %w", err)
	}
	return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, DataType: "application/json", Data: b}, nil
}

// types lists this silo's agent types for a peer.
func (h *peerHandler) types() (*agentsilov1.AgentMessage, error) {
	l := &agentsilov1.ListTypesResponse{}
	for _, t := range h.rt.Registry().Types() {
		p := gateway.TypeProto(t)
		p.Declared = h.declared.declared(t.Name)
		l.Types = append(l.Types, p)
	}
	b, err := proto.Marshal(l)
	if err != nil {
		return nil, errs.New(codes.Internal, "types: %w", err)
	}
	return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, DataType: "application/protobuf", Data: b}, nil
}
