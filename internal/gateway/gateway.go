package gateway

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/protocol"
	"github.com/agentsilo/agentsilo/internal/tracing"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/topics"
)

// DefaultPrincipal is the principal of a client that declares none.
const DefaultPrincipal = auth.DefaultPrincipal

// Config configures a Gateway. Start from DefaultConfig.
type Config struct {
	// Silo names this silo in Welcome and ListMembers. Default: the
	// runtime's Config().Silo.
	Silo string
	// Addr is the address the gateway listens on (--gateway-addr). Validate
	// refuses a non-loopback address unless Insecure is set. Default:
	// 127.0.0.1:7070.
	Addr string
	// MaxMessageSize bounds an AgentMessage's encoded size; a larger one is
	// answered with ResourceExhausted. Default: 4 MiB.
	MaxMessageSize int
	// SessionBacklog bounds the messages queued for one client session that
	// it has not received yet (it is disconnected, or slow). Past it, sending
	// to the session fails with ResourceExhausted. Default: 1000.
	SessionBacklog int
	// SessionBacklogAge is how long a disconnected session is kept, with its
	// backlog, for the client to re-attach. Default: 2 min.
	SessionBacklogAge time.Duration
	// Limits bound what one client can make the gateway hold (see
	// limits.go). Default: DefaultLimits().
	Limits Limits
	// Insecure lets the gateway accept self-declared principals on a
	// non-loopback address (--insecure). Without authentication (Auth) the
	// gateway otherwise only serves loopback.
	Insecure bool
	// Auth says how clients are authenticated (API keys, client
	// certificates); with neither, principals are self-declared.
	Auth auth.Config
	// ACL, if set, is enforced on every client call, and its admin service
	// (agentsilov1.AclAdmin) is served. Nil: no access control.
	ACL *acl.Authority
	// Audit, if set, records the states deleted through the gateway.
	Audit *audit.Log
	// Cluster, if set, gives ListMembers and ListAgents the whole cluster,
	// and session addresses name this silo so that other silos can reach
	// them. Nil: a single silo.
	Cluster ClusterInfo
	// Topics, if set, serves the Topics service (agentsilov1.Topics, see
	// topics.go) beside the Gateway service. Nil: not served.
	Topics *topics.Service
	// Broadcast, if set, reaches the agents of the whole cluster matching a
	// pattern, for the Topics service's Broadcast.
	Broadcast func(ctx context.Context, pattern string, msg *agentsilov1.AgentMessage) (int, error)
	// TracerProvider makes the server span of each client call (see
	// tracing.go). Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Logger receives the gateway's logs. Default: slog.Default().
	Logger *slog.Logger
}

// ClusterInfo is what a gateway needs to know of the cluster around it.
type ClusterInfo interface {
	// Members returns the silos of the current view, each with its count
	// of activations, and the view's version. With an error it returns what
	// it could gather.
	Members(ctx context.Context) ([]*agentsilov1.Member, int64, error)
	// Types lists the agent types the silos host, by name.
	Types(ctx context.Context) ([]*agentsilov1.AgentType, error)
	// Deactivate ends the activation of addr (canonical) on the silo that
	// holds it, if any, after its current turn, and says whether there
	// was one.
	Deactivate(ctx context.Context, addr string) (wasActive bool, err error)
	// Agents lists the activations of every silo, of one type if typeName
	// is not empty. With an error it returns what it could gather.
	Agents(ctx context.Context, typeName string) ([]*agentsilov1.ActivationInfo, error)
}

// DefaultConfig returns the defaults described on Config's
// fields.
func DefaultConfig() Config {
	return Config{
		Addr:              "127.0.0.1:7070",
		MaxMessageSize:    protocol.DefaultMaxMessageSize,
		SessionBacklog:    1000,
		SessionBacklogAge: 2 * time.Minute,
		Limits:            DefaultLimits(),
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.MaxMessageSize < 1024:
		return errs.New(codes.InvalidArgument, "gateway: MaxMessageSize %d must be at least 1024", c.MaxMessageSize)
	case c.SessionBacklog < 1:
		return errs.New(codes.InvalidArgument, "gateway: SessionBacklog %d must be at least 1", c.SessionBacklog)
	case c.SessionBacklogAge <= 0:
		return errs.New(codes.InvalidArgument, "gateway: SessionBacklogAge %v must be positive", c.SessionBacklogAge)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if c.Addr != "" && !c.Insecure && !c.Auth.Enabled() {
		if err := auth.CheckLoopback("gateway", c.Addr); err != nil {
			return err
		}
	}
	return nil
}

// Gateway is the client-facing gRPC service of a silo (agentsilov1.Gateway):
// client sessions with pushed messages, unary Ask and Send, CreateAgent and
// the listings. Its gRPC server also serves the standard health service and
// server reflection.
//
// Its client sessions live in a Sessions, made before the runtime (as the
// runtime's siloapi.SessionRouter) and handed to New.
//
// Clients are authenticated as Config.Auth says (API keys, client
// certificates), or, without it, declare their principal (Hello.principal,
// or the x-agentsilo-principal metadata on unary calls; default "dev"). With
// an ACL, every client call is checked (see clientgrain.go).
//
// All methods are safe for concurrent use.
type Gateway struct {
	agentsilov1.UnimplementedGatewayServer

	cfg    Config
	rt     *grain.Runtime
	logger *slog.Logger
	server *grpc.Server
	health *health.Server
	authn  *auth.Authenticator
	tracer tracing.Tracer

	addr atomic.Value // string: the listener's address, once serving

	sessions   *Sessions
	principals *principals // calls and pending Hellos per principal (limits.go)
	conns      conns       // the client connections (limits.go)

	drainOnce sync.Once
	drain     chan struct{} // closed by GracefulStop: sessions end
	stopOnce  sync.Once
	stop      chan struct{} // closed by Stop: the sweeper ends

	bgMu     sync.Mutex     // orders spawn's Add before Stop's Wait
	stopping bool           // Stop has begun: spawn starts nothing more
	bg       sync.WaitGroup // the sweeper and the sessions' readers

	// testHookDetached, if set, is called when a stream detaches from a
	// session.
	testHookDetached func(addr string)
	// testHookStalled and testHookStallEnd, if set, are called when a
	// session stream stops being read for lack of room, and when it is
	// ended for not reading its results (see limits.go).
	testHookStalled, testHookStallEnd func(addr string)
	// testHookOpened, if set, is called when a session stream has found or
	// made its session, before it attaches to it.
	testHookOpened func(addr string)
}

// New returns a gateway for the agents of rt and the client sessions of
// sessions (rt's SessionRouter, or a router that reaches it). It starts
// nothing; Serve does.
func New(cfg Config, rt *grain.Runtime, sessions *Sessions) (*Gateway, error) {
	if rt == nil || sessions == nil {
		return nil, errs.New(codes.InvalidArgument, "gateway: New: nil Runtime or Sessions")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Silo == "" {
		cfg.Silo = rt.Config().Silo
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		authn:    authn,
		tracer:   tracing.New(cfg.TracerProvider),
		cfg:      cfg,
		rt:       rt,
		logger:   cfg.Logger.With("component", "gateway"),
		health:   health.NewServer(),
		sessions: sessions,
		drain:    make(chan struct{}),
		stop:     make(chan struct{}),
	}
	g.principals = newPrincipals(cfg.Limits)
	sessions.forgotten = g.sessionEnded // topics.go: a session's topic subscriptions end with it
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	g.health.SetServingStatus(agentsilov1.Gateway_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	limit := cfg.MaxMessageSize + protocol.FrameOverhead
	g.server = grpc.NewServer(append(authn.ServerOptions(), grpc.ChainUnaryInterceptor(unaryDecoded, g.unaryLimit, g.unaryACL), grpc.ForceServerCodecV2(newCodec()),
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxSendMsgSize(limit),
		grpc.WaitForHandlers(true),
		keepaliveParams, keepalivePolicy,
	)...)
	agentsilov1.RegisterGatewayServer(g.server, g)
	if cfg.ACL != nil {
		agentsilov1.RegisterAclAdminServer(g.server, acl.NewAdminServer(cfg.ACL))
	}
	if cfg.Topics != nil || cfg.Broadcast != nil {
		agentsilov1.RegisterTopicsServer(g.server, topicServer{g: g})
	}
	healthpb.RegisterHealthServer(g.server, g.health)
	reflection.Register(g.server)
	return g, nil
}

// The gateway's keepalives, which its stand-in (standin.go) shares: it
// notices dead clients, so their sessions detach and keep a backlog, and
// lets the SDK ping every 5 s, on a connection without calls too.
var (
	keepaliveParams = grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second})
	keepalivePolicy = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})
)

// Serve serves gRPC on lis until Stop or GracefulStop, and returns nil then.
// It refuses a non-loopback listener unless the config is Insecure.
func (g *Gateway) Serve(lis net.Listener) error {
	addr := lis.Addr().String()
	if _, ok := lis.Addr().(*net.TCPAddr); ok && !g.cfg.Insecure && !g.authn.Enabled() {
		if err := auth.CheckLoopback("gateway", addr); err != nil {
			return err
		}
	}
	if g.authn.Enabled() {
		g.logger.Info("gateway authenticates clients", "addr", addr, "with", g.authn.Mode(), "tls", g.authn.TLSConfig() != nil, "acl", g.cfg.ACL != nil)
	} else if g.cfg.Insecure {
		g.logger.Warn("gateway accepts self-declared principals without authentication (--insecure)", "addr", addr)
	} else {
		g.logger.Warn("gateway accepts self-declared principals (no authentication configured); serving loopback only", "addr", addr)
	}
	g.addr.Store(addr)
	if !g.spawn(func() { g.sessions.sweepLoop(g.stop) }) {
		return grpc.ErrServerStopped
	}
	lis = g.conns.listener(lis)
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.health.SetServingStatus(agentsilov1.Gateway_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return g.server.Serve(lis)
}

// SetServing sets what the health service reports (SERVING from Serve on):
// the silo turns it off when it stops serving activations.
func (g *Gateway) SetServing(on bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if on {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus("", st)
	g.health.SetServingStatus(agentsilov1.Gateway_ServiceDesc.ServiceName, st)
}

// GracefulStop stops taking new calls and sessions (health turns
// NOT_SERVING), lets the calls in flight finish and their results be written,
// ends every session stream with Unavailable (clients re-attach elsewhere),
// and then stops as Stop does. Calling Stop meanwhile cuts the wait short.
func (g *Gateway) GracefulStop() {
	g.health.Shutdown()
	g.drainOnce.Do(func() { close(g.drain) })
	g.server.GracefulStop()
	g.Stop()
}

// Stop closes the listeners and every connection at once, cancelling the
// calls in flight, and returns when their handlers have returned. A gateway
// holds a goroutine from New until Stop or GracefulStop.
func (g *Gateway) Stop() {
	g.health.Shutdown()
	g.bgMu.Lock()
	g.stopping = true
	g.stopOnce.Do(func() { close(g.stop) })
	g.bgMu.Unlock()
	g.server.Stop()
	g.bg.Wait()
}

// spawn runs f in a goroutine that Stop waits for, and reports false,
// starting nothing, once Stop has begun (a WaitGroup may not grow from zero
// while it is waited on).
func (g *Gateway) spawn(f func()) bool {
	g.bgMu.Lock()
	defer g.bgMu.Unlock()
	if g.stopping {
		return false
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		f()
	}()
	return true
}

// Draining reports whether GracefulStop has begun: the gateway takes no new
// sessions or calls.
func (g *Gateway) Draining() bool { return g.checkDraining() != nil }

// checkDraining returns Unavailable once GracefulStop has begun.
func (g *Gateway) checkDraining() error {
	select {
	case <-g.drain:
		return errs.New(codes.Unavailable, "gateway %s is shutting down", g.cfg.Silo)
	default:
		return nil
	}
}

// unaryPrincipal is the principal of a unary call: authenticated, or
// declared in its metadata (development mode).
func unaryPrincipal(ctx context.Context) (string, error) {
	c, err := unaryCaller(ctx)
	if err != nil {
		return "", err
	}
	return c.Principal, nil
}

// checkMessage validates what a client sends before the runtime sees it.
func (g *Gateway) checkMessage(m *agentsilov1.AgentMessage) error {
	if m == nil {
		return errs.New(codes.InvalidArgument, "missing message")
	}
	if n := proto.Size(m); n > g.cfg.MaxMessageSize {
		return errs.New(codes.ResourceExhausted, "message of %d bytes exceeds the maximum of %d: refused before it ran", n, g.cfg.MaxMessageSize)
	}
	return claimLabel(m)
}

// claimLabel checks the content label a client's message claims, and sets
// an unset one to user-input: a client may lower its message's label
// (send what it forwards as agent-message or tool-output), never raise it
// above user-input. A claim of system is PermissionDenied, a value this
// version does not know InvalidArgument.
func claimLabel(m *agentsilov1.AgentMessage) error {
	switch l := m.GetLabel(); {
	case l == agentsilov1.ContentLabel_CONTENT_LABEL_UNSPECIFIED:
		m.Label = agentsilov1.ContentLabel_CONTENT_LABEL_USER_INPUT
	case l == agentsilov1.ContentLabel_CONTENT_LABEL_SYSTEM:
		return errs.New(codes.PermissionDenied, "the message claims the content label system, which only the runtime gives (a client's message is user-input at most; see docs/trust.md): refused before it ran")
	case !l.Known():
		return errs.New(codes.InvalidArgument, "the message's content label %d is not one of system, user-input, agent-message, tool-request, tool-output: refused before it ran", int32(l))
	}
	return nil
}

// checkKind refuses a message whose kind the entry point what does not
// send, as a session Call refuses a kind it does not know: an unset kind
// (KIND_UNSPECIFIED) takes the entry point's own, any other must be one of
// want.
func checkKind(m *agentsilov1.AgentMessage, what string, want ...agentsilov1.Kind) error {
	k := m.GetKind()
	if k == agentsilov1.Kind_KIND_UNSPECIFIED {
		return nil
	}
	for _, w := range want {
		if k == w {
			return nil
		}
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w.String()
	}
	return errs.New(codes.InvalidArgument, "%s: message kind %v: want %s or none", what, k, strings.Join(names, ", "))
}

// stamp makes m come from the client at from, on behalf of the client's
// principal (the owner of from), which the messages of its call chain carry
// on: a from or on_behalf_of set by the client is ignored, the runtime
// starts a new call chain, and the topic fields are the runtime's.
func stamp(m *agentsilov1.AgentMessage, from string) {
	m.From = from
	m.OnBehalfOf = ""
	if a, err := grain.ParseAddress(from); err == nil {
		m.OnBehalfOf = a.Owner
	}
	m.CallChainId = ""
	m.Topic, m.Subscription = "", "" // only the runtime delivers for topics
}

// dispatch runs one client message through the runtime: an Ask for a REQUEST,
// a Send for ONE_WAY and EVENT. For a Send it returns an empty message with
// the id the runtime gave. It runs in a server span, child of the trace the
// client's message carries.
func (g *Gateway) dispatch(ctx context.Context, m *agentsilov1.AgentMessage, timeout time.Duration) (r *agentsilov1.AgentMessage, err error) {
	ctx, span := g.tracer.Start(ctx, "gateway "+tracing.KindName(m.Kind), trace.SpanKindServer, m, attribute.String("agentsilo.from", m.GetFrom()))
	defer func() { tracing.End(span, err) }()
	switch m.Kind {
	case agentsilov1.Kind_KIND_REQUEST:
		if timeout < 0 {
			return nil, errs.New(codes.InvalidArgument, "timeout %v must not be negative", timeout)
		}
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		r, err := g.rt.Ask(ctx, grain.MessageFromProto(m))
		w := grain.MessageToProto(r)
		if err == nil {
			err = checkReply(w)
		}
		return w, err
	case agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT:
		msg := grain.MessageFromProto(m)
		if err := g.rt.Send(ctx, msg); err != nil {
			return nil, err
		}
		return &agentsilov1.AgentMessage{Id: msg.ID}, nil
	default:
		return nil, errs.New(codes.InvalidArgument, "message kind %v: want KIND_REQUEST, KIND_ONE_WAY or KIND_EVENT", m.Kind)
	}
}

// unaryFrom is the sender address of a unary call. It names no session the
// gateway holds: an agent that sends to it gets NotFound (pushes need a
// Session).
func unaryFrom(p string) string {
	return grain.SessionType + ":" + p + ":unary-" + grain.NewID()
}

// Ask implements agentsilov1.GatewayServer.
func (g *Gateway) Ask(ctx context.Context, req *agentsilov1.AskRequest) (*agentsilov1.AskResponse, error) {
	p, err := unaryPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	m := req.GetMessage()
	if err := g.checkMessage(m); err != nil {
		return nil, err
	}
	if err := checkKind(m, "Ask", agentsilov1.Kind_KIND_REQUEST); err != nil {
		return nil, err
	}
	stamp(m, unaryFrom(p))
	m.Kind = agentsilov1.Kind_KIND_REQUEST
	r, err := g.dispatch(ctx, m, time.Duration(req.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &agentsilov1.AskResponse{Message: r}, nil
}

// Send implements agentsilov1.GatewayServer.
func (g *Gateway) Send(ctx context.Context, req *agentsilov1.SendRequest) (*agentsilov1.SendResponse, error) {
	p, err := unaryPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	m := req.GetMessage()
	if err := g.checkMessage(m); err != nil {
		return nil, err
	}
	if err := checkKind(m, "Send", agentsilov1.Kind_KIND_ONE_WAY, agentsilov1.Kind_KIND_EVENT); err != nil {
		return nil, err
	}
	stamp(m, unaryFrom(p))
	if m.Kind != agentsilov1.Kind_KIND_EVENT {
		m.Kind = agentsilov1.Kind_KIND_ONE_WAY
	}
	r, err := g.dispatch(ctx, m, 0)
	if err != nil {
		return nil, err
	}
	return &agentsilov1.SendResponse{Id: r.Id}, nil
}

// CreateAgent implements agentsilov1.GatewayServer.
func (g *Gateway) CreateAgent(ctx context.Context, req *agentsilov1.CreateAgentRequest) (*agentsilov1.CreateAgentResponse, error) {
	p, err := unaryPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	a, err := g.rt.CreateAgent(ctx, p, req.GetAddress(), req.GetConfig())
	if err != nil {
		return nil, err
	}
	return &agentsilov1.CreateAgentResponse{Address: a.String()}, nil
}

// ListAgents implements agentsilov1.GatewayServer.
func (g *Gateway) ListAgents(ctx context.Context, req *agentsilov1.ListAgentsRequest) (*agentsilov1.ListAgentsResponse, error) {
	if _, err := unaryPrincipal(ctx); err != nil {
		return nil, err
	}
	if req.GetStored() {
		return g.listStored(ctx, req)
	}
	if g.cfg.Cluster != nil {
		out, err := g.cfg.Cluster.Agents(ctx, req.GetType())
		if err != nil {
			return nil, err
		}
		return &agentsilov1.ListAgentsResponse{Agents: ownedBy(req.GetOwner(), out)}, nil
	}
	acts := g.rt.Activations(req.GetType())
	out := make([]*agentsilov1.ActivationInfo, 0, len(acts))
	for _, a := range acts {
		out = append(out, &agentsilov1.ActivationInfo{
			Address:      a.Address.String(),
			Silo:         a.Silo,
			ActivatedAt:  timestamppb.New(a.ActivatedAt),
			LastActive:   timestamppb.New(a.LastActive),
			MailboxDepth: uint32(max(a.MailboxDepth, 0)),
		})
	}
	return &agentsilov1.ListAgentsResponse{Agents: ownedBy(req.GetOwner(), out)}, nil
}

// ListMembers implements agentsilov1.GatewayServer. A single silo is a
// cluster of one.
func (g *Gateway) ListMembers(ctx context.Context, _ *agentsilov1.ListMembersRequest) (*agentsilov1.ListMembersResponse, error) {
	if _, err := unaryPrincipal(ctx); err != nil {
		return nil, err
	}
	if g.cfg.Cluster != nil {
		ms, version, err := g.cfg.Cluster.Members(ctx)
		if err != nil && len(ms) == 0 {
			return nil, err
		}
		return &agentsilov1.ListMembersResponse{Members: ms, Version: version}, nil
	}
	addr, _ := g.addr.Load().(string)
	return &agentsilov1.ListMembersResponse{
		Members: []*agentsilov1.Member{{
			Name:        g.cfg.Silo,
			GatewayAddr: addr,
			State:       "alive",
			Self:        true,
			Activations: uint32(max(g.rt.Len(), 0)),
		}},
		Version: 1,
	}, nil
}
