package gateway

import (
	"context"
	"path"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/tracing"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/topics"
)

// topicServer is the Topics service (agentsilov1.Topics) of a gateway: it
// checks each call against the ACL and hands it to the silo's
// topics.Service. The ACL sees a topic's owner as the owner and its name
// (or a subscription's pattern) as the alias; a subscription, `owner:name`,
// is checked as the agent owner:name.
//
//	Publish                    Message on the topic
//	Subscribe                  Read on the pattern, Configure on the agent
//	Unsubscribe                Configure on the agent
//	ListSubscriptions          Read on each subscription listed
//	ListDeadLetters            Read on the subscription
//	ReplayDeadLetters, Drop    Configure on the subscription
//	Broadcast                  Message on the pattern's owner (a literal
//	                           owner), or an operator's for any pattern
type topicServer struct {
	agentsilov1.UnimplementedTopicsServer
	g *Gateway
}

// topicKind is the type the ACL's errors name for topics and subscriptions.
const topicKind = "topic"

func (ts topicServer) svc() (*topics.Service, error) {
	if ts.g.cfg.Topics == nil {
		return nil, errs.New(codes.Unavailable, "topics are not configured on silo %s", ts.g.cfg.Silo)
	}
	return ts.g.cfg.Topics, nil
}

// check checks that c holds need on owner:alias (its own: always).
func (ts topicServer) check(c *acl.Caller, owner, alias string, need acl.Permission) error {
	if ts.g.cfg.ACL == nil {
		return nil
	}
	return ts.g.cfg.ACL.Authorize(c, topicKind, owner, alias, need)
}

// subscription resolves a subscription id for c and checks need on it.
func (ts topicServer) subscription(ctx context.Context, s string, need acl.Permission) (string, error) {
	c, err := unaryCaller(ctx)
	if err != nil {
		return "", err
	}
	id, err := topics.ParseSubscription(s, c.Principal)
	if err != nil {
		return "", err
	}
	owner, name, _ := strings.Cut(id, ":")
	return id, ts.check(c, owner, name, need)
}

// Publish implements agentsilov1.TopicsServer.
func (ts topicServer) Publish(ctx context.Context, req *agentsilov1.PublishRequest) (_ *agentsilov1.PublishResponse, err error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := topics.ParseTopic(req.GetTopic(), c.Principal)
	if err != nil {
		return nil, err
	}
	if err := ts.check(c, t.Owner, t.Name, acl.Message); err != nil {
		return nil, err
	}
	m := req.GetMessage()
	if m == nil {
		m = &agentsilov1.AgentMessage{}
	}
	if err := ts.g.checkMessage(m); err != nil {
		return nil, err
	}
	if err := checkKind(m, "Publish", agentsilov1.Kind_KIND_REQUEST, agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT); err != nil {
		return nil, err
	}
	from := grain.SessionType + ":" + c.Principal + ":unary-" + grain.NewID()
	if p := req.GetPublisher(); p != "" {
		a, err := grain.ParseAddress(p)
		if err != nil || a.Type != grain.SessionType || a.Owner != c.Principal {
			return nil, errs.New(codes.InvalidArgument, "publisher %q: want a session address of %s's (Session:%s:...)", protocol.Clip(p), c.Principal, c.Principal)
		}
		from = p
	}
	ctx, span := ts.g.tracer.Start(ctx, "gateway Publish", trace.SpanKindServer, m, attribute.String("agentsilo.topic", t.String()))
	defer func() { tracing.End(span, err) }()
	if timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond; timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	} else if timeout < 0 {
		return nil, errs.New(codes.InvalidArgument, "timeout %v must not be negative", timeout)
	}
	r, err := svc.PublishMessage(ctx, from, t.String(), grain.MessageFromProto(m))
	if err != nil {
		return nil, err
	}
	return &agentsilov1.PublishResponse{Id: r.ID, Subscriptions: uint32(r.Subscriptions), Duplicate: r.Duplicate}, nil
}

// maxPublishBatch bounds the entries of one PublishBatch.
const maxPublishBatch = 1000

// PublishBatch implements agentsilov1.TopicsServer: each entry checked as
// Publish checks it (a refused one fails alone), the others published
// together, in order.
func (ts topicServer) PublishBatch(ctx context.Context, req *agentsilov1.PublishBatchRequest) (_ *agentsilov1.PublishBatchResponse, err error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	entries := req.GetEntries()
	if len(entries) > maxPublishBatch {
		return nil, errs.New(codes.InvalidArgument, "a batch of %d messages: at most %d", len(entries), maxPublishBatch)
	}
	from := grain.SessionType + ":" + c.Principal + ":unary-" + grain.NewID()
	if p := req.GetPublisher(); p != "" {
		a, err := grain.ParseAddress(p)
		if err != nil || a.Type != grain.SessionType || a.Owner != c.Principal {
			return nil, errs.New(codes.InvalidArgument, "publisher %q: want a session address of %s's (Session:%s:...)", protocol.Clip(p), c.Principal, c.Principal)
		}
		from = p
	}
	if timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond; timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	} else if timeout < 0 {
		return nil, errs.New(codes.InvalidArgument, "timeout %v must not be negative", timeout)
	}
	ctx, span := ts.g.tracer.Start(ctx, "gateway PublishBatch", trace.SpanKindServer, &agentsilov1.AgentMessage{}, attribute.Int("agentsilo.messages", len(entries)))
	defer func() { tracing.End(span, err) }()
	out := &agentsilov1.PublishBatchResponse{Results: make([]*agentsilov1.PublishBatchResult, len(entries))}
	var ps []topics.Publication
	var at []int // the entry of each of ps
	for i, e := range entries {
		if err := ts.checkEntry(c, e); err != nil {
			out.Results[i] = batchFailure(err)
			continue
		}
		m := e.GetMessage()
		if m == nil {
			m = &agentsilov1.AgentMessage{}
		}
		ps = append(ps, topics.Publication{Topic: e.GetTopic(), Message: grain.MessageFromProto(m)})
		at = append(at, i)
	}
	rs, fails := svc.PublishBatch(ctx, from, ps)
	for j, i := range at {
		if fails[j] != nil {
			out.Results[i] = batchFailure(fails[j])
			continue
		}
		r := rs[j]
		out.Results[i] = &agentsilov1.PublishBatchResult{Published: &agentsilov1.PublishResponse{Id: r.ID, Subscriptions: uint32(r.Subscriptions), Duplicate: r.Duplicate}}
	}
	return out, nil
}

// checkEntry checks an entry of a PublishBatch as Publish checks its
// request: the topic, the caller's Message permission on it, the message.
func (ts topicServer) checkEntry(c *acl.Caller, e *agentsilov1.PublishRequest) error {
	t, err := topics.ParseTopic(e.GetTopic(), c.Principal)
	if err != nil {
		return err
	}
	if err := ts.check(c, t.Owner, t.Name, acl.Message); err != nil {
		return err
	}
	m := e.GetMessage()
	if m == nil {
		return nil
	}
	if err := ts.g.checkMessage(m); err != nil {
		return err
	}
	return checkKind(m, "Publish", agentsilov1.Kind_KIND_REQUEST, agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT)
}

func batchFailure(err error) *agentsilov1.PublishBatchResult {
	return &agentsilov1.PublishBatchResult{Code: uint32(errs.Code(err)), Error: err.Error()}
}

// Subscribe implements agentsilov1.TopicsServer.
func (ts topicServer) Subscribe(ctx context.Context, req *agentsilov1.SubscribeRequest) (*agentsilov1.SubscribeResponse, error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	a, err := grain.Resolve(req.GetAgent(), c.Principal)
	if err != nil {
		return nil, err
	}
	p, err := topics.ParsePattern(req.GetPattern(), c.Principal)
	if err != nil {
		return nil, err
	}
	if a.Type == grain.SessionType {
		return ts.subscribeSession(ctx, svc, c, a, p, req)
	}
	if err := ts.g.authorize(c, a, acl.Configure); err != nil {
		return nil, err
	}
	if err := ts.check(c, p.Owner, p.Text, acl.Read); err != nil {
		return nil, err
	}
	rec, err := svc.SubscribeAgent(ctx, a, req.GetName(), p.String(), int(req.GetMaxAttempts()))
	if err != nil {
		return nil, err
	}
	return &agentsilov1.SubscribeResponse{Subscription: &agentsilov1.Subscription{Id: rec.GetId(), Pattern: rec.GetPattern(), MaxAttempts: rec.GetMaxAttempts()}}, nil
}

// subscribeSession subscribes a client session of c's, held by this
// gateway, to the topics of p: Read on p's owner, as an agent's
// subscription. The subscription is delivered into the session's backlog
// by this silo, and removed when the gateway forgets the session (see
// sessionEnded), or this silo ends.
func (ts topicServer) subscribeSession(ctx context.Context, svc *topics.Service, c *acl.Caller, a grain.Address, p topics.Pattern, req *agentsilov1.SubscribeRequest) (*agentsilov1.SubscribeResponse, error) {
	if a.Owner != c.Principal {
		return nil, errs.New(codes.PermissionDenied, "%s may subscribe only sessions of its own, not %s", c.Principal, a)
	}
	if !ts.g.holdsSession(a.String()) {
		return nil, errs.New(codes.NotFound, "no client session %s on this gateway (subscribe through the gateway the session is attached to)", a)
	}
	if err := ts.check(c, p.Owner, p.Text, acl.Read); err != nil {
		return nil, err
	}
	rec, err := svc.SubscribeSession(ctx, a, req.GetName(), p.String(), int(req.GetMaxAttempts()), ts.g.sessions.DeliverToSession)
	if err != nil {
		return nil, err
	}
	if !ts.g.holdsSession(a.String()) {
		// Forgotten meanwhile: its end may have come before the
		// subscription was there to end.
		svc.EndSession(a.String())
		return nil, errs.New(codes.NotFound, "client session %s ended", a)
	}
	return &agentsilov1.SubscribeResponse{Subscription: &agentsilov1.Subscription{Id: rec.GetId(), Pattern: rec.GetPattern(), MaxAttempts: rec.GetMaxAttempts(), Members: []string{a.String()}}}, nil
}

// holdsSession reports whether this gateway holds the session at addr.
func (g *Gateway) holdsSession(addr string) bool {
	g.sessions.mu.RLock()
	defer g.sessions.mu.RUnlock()
	return g.sessions.m[addr] != nil
}

// sessionEnded is told of each session the gateway forgets: its topic
// subscriptions go (topics.Service.EndSession does not block).
func (g *Gateway) sessionEnded(addr string) {
	if g.cfg.Topics != nil {
		g.cfg.Topics.EndSession(addr)
	}
}

// Unsubscribe implements agentsilov1.TopicsServer.
func (ts topicServer) Unsubscribe(ctx context.Context, req *agentsilov1.UnsubscribeRequest) (*agentsilov1.UnsubscribeResponse, error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	a, err := grain.Resolve(req.GetAgent(), c.Principal)
	if err != nil {
		return nil, err
	}
	if err := ts.g.authorize(c, a, acl.Configure); err != nil {
		return nil, err
	}
	deleted, err := svc.UnsubscribeAgent(ctx, a, req.GetName())
	if err != nil {
		return nil, err
	}
	return &agentsilov1.UnsubscribeResponse{Deleted: deleted}, nil
}

// ListSubscriptions implements agentsilov1.TopicsServer.
func (ts topicServer) ListSubscriptions(ctx context.Context, req *agentsilov1.ListSubscriptionsRequest) (*agentsilov1.ListSubscriptionsResponse, error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	owner := req.GetOwner()
	if owner == "" {
		owner = c.Principal
	}
	if !grain.ValidName(owner) {
		return nil, errs.New(codes.InvalidArgument, "owner %q: want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}", protocol.Clip(owner))
	}
	out := &agentsilov1.ListSubscriptionsResponse{Subscriptions: []*agentsilov1.Subscription{}}
	subs, err := svc.Subscriptions(ctx, owner)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		_, name, _ := strings.Cut(s.GetId(), ":")
		if ts.g.cfg.ACL == nil || ts.g.cfg.ACL.Allowed(c, owner, name, acl.Read) {
			out.Subscriptions = append(out.Subscriptions, s)
		}
	}
	return out, nil
}

// ListDeadLetters implements agentsilov1.TopicsServer.
func (ts topicServer) ListDeadLetters(ctx context.Context, req *agentsilov1.ListDeadLettersRequest) (*agentsilov1.ListDeadLettersResponse, error) {
	svc, err := ts.svc()
	if err != nil {
		return nil, err
	}
	id, err := ts.subscription(ctx, req.GetSubscription(), acl.Read)
	if err != nil {
		return nil, err
	}
	ds, more, err := svc.DeadLetters(ctx, id, req.GetAfter(), int(min(req.GetLimit(), 1<<20)))
	if err != nil {
		return nil, err
	}
	if ds == nil {
		ds = []*agentsilov1.DeadLetter{}
	}
	return &agentsilov1.ListDeadLettersResponse{DeadLetters: ds, More: more}, nil
}

// ids is the dead letters a replay or drop names: nil for all.
func ids(list []string, all bool) ([]string, error) {
	switch {
	case all && len(list) > 0:
		return nil, errs.New(codes.InvalidArgument, "give ids or all, not both")
	case all:
		return nil, nil
	case len(list) == 0:
		return nil, errs.New(codes.InvalidArgument, "no dead letter ids (all: every one)")
	}
	return list, nil
}

// ReplayDeadLetters implements agentsilov1.TopicsServer.
func (ts topicServer) ReplayDeadLetters(ctx context.Context, req *agentsilov1.ReplayDeadLettersRequest) (*agentsilov1.ReplayDeadLettersResponse, error) {
	n, err := ts.deadLetters(ctx, req.GetSubscription(), req.GetIds(), req.GetAll(), (*topics.Service).Replay)
	if err != nil {
		return nil, err
	}
	return &agentsilov1.ReplayDeadLettersResponse{Count: n}, nil
}

// DropDeadLetters implements agentsilov1.TopicsServer.
func (ts topicServer) DropDeadLetters(ctx context.Context, req *agentsilov1.DropDeadLettersRequest) (*agentsilov1.DropDeadLettersResponse, error) {
	n, err := ts.deadLetters(ctx, req.GetSubscription(), req.GetIds(), req.GetAll(), (*topics.Service).Drop)
	if err != nil {
		return nil, err
	}
	return &agentsilov1.DropDeadLettersResponse{Count: n}, nil
}

// deadLetters runs op, the topic service's Replay or Drop, on the dead
// letters of subscription sub that reqIDs (or all) name, for a caller
// allowed to configure it, and returns how many it handled.
func (ts topicServer) deadLetters(ctx context.Context, sub string, reqIDs []string, all bool,
	op func(*topics.Service, context.Context, string, []string) (int, error)) (uint32, error) {
	svc, err := ts.svc()
	if err != nil {
		return 0, err
	}
	id, err := ts.subscription(ctx, sub, acl.Configure)
	if err != nil {
		return 0, err
	}
	list, err := ids(reqIDs, all)
	if err != nil {
		return 0, err
	}
	n, err := op(svc, ctx, id, list)
	return uint32(n), err
}

// Broadcast implements agentsilov1.TopicsServer.
func (ts topicServer) Broadcast(ctx context.Context, req *agentsilov1.BroadcastRequest) (*agentsilov1.BroadcastResponse, error) {
	if ts.g.cfg.Broadcast == nil {
		return nil, errs.New(codes.Unavailable, "broadcast is not configured on silo %s", ts.g.cfg.Silo)
	}
	c, err := unaryCaller(ctx)
	if err != nil {
		return nil, err
	}
	pattern := req.GetPattern()
	if _, err := path.Match(pattern, ""); err != nil || len(pattern) > 512 {
		return nil, errs.New(codes.InvalidArgument, "broadcast pattern %q: want a glob over Type:owner:alias", protocol.Clip(pattern))
	}
	if err := ts.checkBroadcast(c, pattern); err != nil {
		return nil, err
	}
	m := req.GetMessage()
	if m == nil {
		m = &agentsilov1.AgentMessage{}
	}
	if err := ts.g.checkMessage(m); err != nil {
		return nil, err
	}
	if err := checkKind(m, "Broadcast", agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT); err != nil {
		return nil, err
	}
	stamp(m, unaryFrom(c.Principal))
	if grain.IsReserved(m.GetMessageType()) {
		return nil, errs.New(codes.InvalidArgument, "message type %q: the %q prefix is reserved for the runtime", protocol.Clip(m.GetMessageType()), grain.ReservedPrefix)
	}
	n, err := ts.g.cfg.Broadcast(ctx, pattern, m)
	if err != nil && n == 0 {
		return nil, err
	}
	return &agentsilov1.BroadcastResponse{Reached: uint32(n)}, nil
}

// checkBroadcast lets c broadcast to agents of one literal owner it may
// message, or, as an operator, to any pattern.
func (ts topicServer) checkBroadcast(c *acl.Caller, pattern string) error {
	if ts.g.cfg.ACL == nil {
		return nil
	}
	parts := strings.SplitN(pattern, ":", 3)
	if len(parts) == 3 && grain.ValidName(parts[1]) {
		return ts.g.cfg.ACL.Authorize(c, "*", parts[1], parts[2], acl.Message)
	}
	if err := ts.g.cfg.ACL.AuthorizeAdmin(c); err != nil {
		return errs.New(codes.PermissionDenied, "%s may broadcast only to a pattern of one literal owner (Type:owner:alias glob); any pattern takes an operator", c.Principal)
	}
	return nil
}
