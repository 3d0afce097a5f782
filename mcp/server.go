package mcp

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/inbox"
)

// Deps are the parts of the silo a Server works with.
type Deps struct {
	// Runtime asks the agents (required).
	Runtime *grain.Runtime
	// Audit, if set, records every MCP tool calls served (see docs/audit.md).
	Audit *audit.Log
	// ACL, if set, is checked on every listing and call.
	ACL *acl.Authority

	// siloInboxes holds the inboxes, which must be the runtime's session
	// router (or in front of it), so that what agents push to a call's
	// sender reaches the call (required; the A2A server's, when both are
	// on): the silo's, which it sets with inbox.Wire; users cannot reach it.
	siloInboxes
}

// siloInboxes is the inbox.Slot embedded in Deps, under a name users cannot
// refer to.
type siloInboxes = inbox.Slot

var _ inbox.Slotted = (*Deps)(nil)

// Server is a silo's MCP server: every agent of the cluster as MCP tools,
// through the official Go SDK's streamable HTTP transport. Its lifecycle
// is New, Serve, Close. Methods are safe for concurrent use.
type Server struct {
	cfg     Config
	rt      *grain.Runtime
	reg     *grain.Registry
	acl     *acl.Authority
	audit   *audit.Log
	logger  *slog.Logger
	auth    *auth.Authenticator
	inboxes *inbox.Inboxes
	maxBody int64

	every      *mcpsdk.Server // the every-agent endpoint's tools
	streamable *mcpsdk.StreamableHTTPHandler
	handler    http.Handler // the streamable handler behind authentication
	http       *http.Server

	mu      sync.Mutex
	types   map[string]*mcpsdk.Server // agents' endpoints, by type, made on first use
	closing bool
	running sync.WaitGroup // tool calls

	hard       context.Context // cancelled to cut calls short at Close
	cancelHard context.CancelFunc

	closeOnce sync.Once
	closeErr  error

	stats sessionStats // for Sessions (sessions.go)
}

// New checks cfg and returns a server for the agents of d.Runtime: the
// tools of the types registered now. It starts nothing.
func New(cfg Config, d Deps) (*Server, error) {
	inboxes := inbox.Wired(&d.siloInboxes)
	if d.Runtime == nil || inboxes == nil {
		return nil, errs.New(codes.InvalidArgument, "mcp: New: Runtime and the silo's inboxes are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "")
	}
	d0 := DefaultConfig()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = d0.CallTimeout
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = d0.SessionTimeout
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = d0.MaxSessions
	}
	if cfg.Version == "" {
		cfg.Version = d0.Version
	}
	if cfg.Silo == "" {
		cfg.Silo = d.Runtime.Config().Silo
	}
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		rt:      d.Runtime,
		reg:     d.Runtime.Registry(),
		acl:     d.ACL,
		audit:   d.Audit,
		logger:  cfg.Logger.With("component", "mcp"),
		auth:    authn,
		inboxes: inboxes,
		maxBody: 2*int64(d.Runtime.Config().MaxMessageSize) + 64<<10,
		types:   make(map[string]*mcpsdk.Server),
	}
	s.hard, s.cancelHard = context.WithCancel(context.Background())
	s.every = s.newSDKServer("Every agent of the agentsilo cluster, as tools named <Type>_<skill>. Each call asks the agent named by its \"agent\" argument (owner:alias); the agent is activated on first use.")
	for _, ti := range s.reg.Types() {
		tools, problems := toolsOf(ti)
		for _, p := range problems {
			s.logger.Warn("mcp: a skill is not offered as a tool", "err", p)
		}
		for _, t := range tools {
			name := everyAgentName(t.typ, t.name)
			schema, ok := t.everySchema()
			switch {
			case !validToolName(name):
				s.logger.Warn("mcp: a skill is offered on its agents' endpoints only: its tool name would be too long", "type", t.typ, "skill", t.skill)
				continue
			case !ok:
				s.logger.Warn("mcp: a skill is offered on its agents' endpoints only: its input has an argument named agent", "type", t.typ, "skill", t.skill)
				continue
			}
			s.every.AddTool(t.sdkTool(name, schema), s.toolHandler(t))
		}
	}
	s.streamable = mcpsdk.NewStreamableHTTPHandler(s.sdkServerFor, &mcpsdk.StreamableHTTPOptions{
		Logger:              s.logger,
		SessionTimeout:      cfg.SessionTimeout,
		MaxRequestBodyBytes: s.maxBody,
	})
	s.handler = s.authenticated(s.streamable)
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         authn.TLSConfig(),
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// newSDKServer returns an SDK server with the listing check.
func (s *Server) newSDKServer(instructions string) *mcpsdk.Server {
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "agentsilo", Title: "agentsilo agents", Version: s.cfg.Version},
		&mcpsdk.ServerOptions{
			Instructions: instructions,
			Logger:       s.logger,
			HasTools:     true,
		})
	srv.AddReceivingMiddleware(s.guardListing, s.track)
	return srv
}

// typeServer returns the SDK server of the endpoints of agents of typ,
// made on first use, or nil if typ is not registered.
func (s *Server) typeServer(typ string) *mcpsdk.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.types[typ]; ok {
		return srv
	}
	ti, ok := s.reg.Info(typ)
	if !ok {
		return nil
	}
	srv := s.newSDKServer("An agent of type " + typ + " of the agentsilo cluster: each tool is one of its skills.")
	tools, problems := toolsOf(ti)
	for _, p := range problems {
		s.logger.Warn("mcp: a skill is not offered as a tool", "err", p)
	}
	for _, t := range tools {
		srv.AddTool(t.sdkTool(t.name, t.schema), s.toolHandler(t))
	}
	s.types[typ] = srv
	return srv
}

// AddTool adds a tool of the server's own to the every-agent endpoint
// (/mcp). Its handler runs on behalf of the authenticated caller, whom
// CallerFrom returns; an error it returns is a JSON-RPC error (a
// *jsonrpc.Error as it is, anything else an internal error). The tool's
// name must be a valid tool name and its input schema a JSON Schema
// object of type "object"; AddTool logs and skips one that is not.
func (s *Server) AddTool(t *mcpsdk.Tool, h mcpsdk.ToolHandler) {
	if t == nil || h == nil || !validToolName(t.Name) || !objectSchema(t.InputSchema) {
		s.logger.Error("mcp: AddTool: a tool needs a valid name ([A-Za-z0-9_.-], at most 128) and an input schema of type object: skipped", "tool", toolNameOf(t))
		return
	}
	s.every.AddTool(t, func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		c, ok := infoOf(req.Extra)
		if !ok {
			return nil, protocolError(errs.New(codes.Unauthenticated, "no authenticated caller"))
		}
		return h(withCaller(ctx, c.caller), req)
	})
}

func toolNameOf(t *mcpsdk.Tool) string {
	if t == nil {
		return ""
	}
	return t.Name
}

// objectSchema reports whether a tool's input schema is a JSON object
// whose type is "object", as the SDK requires.
func objectSchema(schema any) bool {
	m, ok := asMap(schema)
	return ok && m["type"] == "object"
}

type callerKey struct{}

func withCaller(ctx context.Context, c *acl.Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the authenticated caller of the request that a tool
// handler added with AddTool runs for.
func CallerFrom(ctx context.Context) (*acl.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*acl.Caller)
	return c, ok && c != nil
}

// Handler returns the server's HTTP handler (for tests and for mounting it
// in a server of one's own; Serve serves it).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Serve serves HTTP (HTTPS with the gateway's certificate) on lis until
// Close, and returns nil then. It refuses a non-loopback listener when
// callers are not authenticated, unless the config is Insecure.
func (s *Server) Serve(lis net.Listener) error {
	if _, ok := lis.Addr().(*net.TCPAddr); ok && !s.cfg.Insecure && !s.auth.Enabled() {
		if err := auth.CheckLoopback("mcp", lis.Addr().String()); err != nil {
			return err
		}
	}
	s.logger.Info("mcp serving", "addr", lis.Addr().String(), "tls", s.http.TLSConfig != nil, "authenticated", s.auth.Enabled())
	if s.http.TLSConfig != nil {
		lis = tls.NewListener(lis, s.http.TLSConfig)
	}
	if err := s.http.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close shuts the server down: new calls are refused, the calls running
// may finish until ctx ends (then they are cancelled, and so are their
// turns), and the sessions and connections are closed.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(ctx) })
	return s.closeErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	servers := []*mcpsdk.Server{s.every}
	for _, srv := range s.types {
		servers = append(servers, srv)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	// The calls get two thirds of the time left: the silo's other parts
	// close after this, within the same deadline.
	wait := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, dl.Add(-time.Until(dl)/3))
		defer cancel()
	}
	var errOut error
	select {
	case <-done:
	case <-wait.Done():
		errOut = errors.New("mcp: close: tool calls still running at the deadline were cancelled")
		s.cancelHard()
		<-done
	}
	s.cancelHard()
	for _, srv := range servers {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.http.Close()
	}
	return errOut
}

// begin registers a running call, or refuses it while the server closes.
func (s *Server) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errs.New(codes.Unavailable, "the silo's MCP server is shutting down")
	}
	s.running.Add(1)
	return nil
}

// sessions counts the open MCP sessions.
func (s *Server) sessions() int {
	s.mu.Lock()
	servers := []*mcpsdk.Server{s.every}
	for _, srv := range s.types {
		servers = append(servers, srv)
	}
	s.mu.Unlock()
	n := 0
	for _, srv := range servers {
		for range srv.Sessions() {
			n++
		}
	}
	return n
}
