package a2a

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/push"
	"github.com/a2aproject/a2a-go/v2/a2asrv/workqueue"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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
	// Audit, if set, records every A2A tasks served (see docs/audit.md).
	Audit *audit.Log
	// ACL, if set, is checked on every call (see guard).
	ACL *acl.Authority
	// Etcd and Prefix are the silo's etcd, where tasks live (required).
	Etcd   *clientv3.Client
	Prefix string
	// Outside, if set, lists the service directory's outside A2A agents,
	// which the root card and GET /a2a show beside the agent types.
	Outside func(ctx context.Context) []grain.DirectoryEntry

	// siloInboxes holds the inboxes, which must be the runtime's session
	// router (or in front of it), so that what agents push to a turn's
	// sender reaches the turn (required): the silo's, which it sets with
	// inbox.Wire; users cannot reach it.
	siloInboxes
}

// siloInboxes is the inbox.Slot embedded in Deps, under a name users cannot
// refer to.
type siloInboxes = inbox.Slot

var _ inbox.Slotted = (*Deps)(nil)

// Server is a silo's A2A server: every agent of the cluster as an A2A
// agent, through the official SDK's handlers (a2asrv) in its cluster mode,
// with this package's executor, task store, event queues, push config store
// and work queue. Its lifecycle is New, Start (the lease and the watch of
// departed silos), Serve, Close. Methods are safe for concurrent use.
type Server struct {
	cfg    Config
	rt     *grain.Runtime
	reg    *grain.Registry
	acl    *acl.Authority
	audit  *audit.Log
	cli    *clientv3.Client
	prefix string
	logger *slog.Logger

	auth    *auth.Authenticator
	inboxes *inbox.Inboxes
	outside func(ctx context.Context) []grain.DirectoryEntry // Deps.Outside
	store   *taskStore
	queues  *queues
	pushes  *pushStore
	turns   turns
	maxBody int

	handler a2asrv.RequestHandler
	jsonrpc http.Handler // spec 1.0 JSON-RPC
	rest    http.Handler // spec 1.0 HTTP+JSON
	v03     http.Handler // spec 0.3 JSON-RPC (the SDK's compat handler)
	cards   http.Handler // agent cards
	cards03 http.Handler // agent cards for 0.3 clients (the 0.3 fields beside the 1.0 ones)
	dirCard http.Handler // the directory card
	grpc    *grpc.Server // spec 1.0 gRPC, on the same port (see grpc.go)
	http    *http.Server

	lease atomic.Int64 // this silo's lease (clientv3.LeaseID)

	base       context.Context // the server's life: requests, watches, keepalive
	cancelBase context.CancelFunc
	hard       context.Context // cancelled to cut executions short at Close
	cancelHard context.CancelFunc
	bg         sync.WaitGroup // the keepalive and the watch
	running    sync.WaitGroup // executions and cancels (work)

	mu      sync.Mutex
	closing bool

	closeOnce sync.Once
	closeErr  error
}

// New checks cfg and returns a server for the agents of d.Runtime. It
// starts nothing.
func New(cfg Config, d Deps) (*Server, error) {
	inboxes := inbox.Wired(&d.siloInboxes)
	if d.Runtime == nil || d.Etcd == nil || inboxes == nil {
		return nil, errs.New(codes.InvalidArgument, "a2a: New: Runtime, Etcd and the silo's inboxes are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, errs.Wrap(codes.InvalidArgument, err, "")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TaskTimeout <= 0 {
		cfg.TaskTimeout = DefaultConfig().TaskTimeout
	}
	if cfg.Silo == "" {
		cfg.Silo = d.Runtime.Config().Silo
	}
	if cfg.DefaultAgent != "" {
		a, _ := grain.ParseAddress(cfg.DefaultAgent) // checked by Validate
		if _, ok := d.Runtime.Registry().Info(a.Type); !ok {
			return nil, errs.New(codes.InvalidArgument, "a2a: default agent %s: type %s is not registered", a, a.Type)
		}
		cfg.DefaultAgent = a.String()
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
		cli:     d.Etcd,
		prefix:  d.Prefix,
		logger:  cfg.Logger.With("component", "a2a"),
		auth:    authn,
		inboxes: inboxes,
		outside: d.Outside,
		maxBody: 2*d.Runtime.Config().MaxMessageSize + 64<<10,
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.hard, s.cancelHard = context.WithCancel(context.Background())
	s.store = &taskStore{cli: d.Etcd, prefix: d.Prefix, silo: cfg.Silo, lease: func() clientv3.LeaseID { return clientv3.LeaseID(s.lease.Load()) },
		retain: newRetainer(d.Etcd, cfg.TaskRetention), logger: s.logger}
	s.queues = newQueues(s.base, s.store)
	s.pushes = &pushStore{cli: d.Etcd, prefix: d.Prefix}
	w := &work{s: s}
	wq, run := workqueue.NewPushQueue(w)
	w.handler = run
	sender := push.NewHTTPPushSender(&push.HTTPSenderConfig{Timeout: 10 * time.Second, AllowPrivateNetworks: cfg.AllowPrivateNetworks})
	s.handler = a2asrv.NewHandler(&executor{s: s},
		a2asrv.WithClusterMode(a2asrv.ClusterConfig{QueueManager: s.queues, WorkQueue: wq, TaskStore: s.store}),
		a2asrv.WithPushNotifications(s.pushes, sender),
		a2asrv.WithCallInterceptors(guard{s: s}),
		a2asrv.WithExtendedAgentCardProducer(extendedCards{s: s}),
		a2asrv.WithCapabilityChecks(&spec.AgentCapabilities{Streaming: true, PushNotifications: true, ExtendedAgentCard: s.extendedCard()}),
		a2asrv.WithLogger(s.logger),
	)
	s.jsonrpc = a2asrv.NewJSONRPCHandler(s.handler)
	s.rest = a2asrv.NewRESTHandler(s.handler)
	s.v03 = a2av0.NewJSONRPCHandler(s.handler)
	s.cards = a2asrv.NewAgentCardHandler(cardProducer{s: s})
	s.cards03 = a2asrv.NewAgentCardHandler(a2av0.NewAgentCardProducer(cardProducer{s: s}))
	s.dirCard = a2asrv.NewAgentCardHandler(cardProducer{s: s})
	s.grpc = s.newGRPC()
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		TLSConfig:         authn.TLSConfig(),
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	s.http.Protocols = grpcProtocols(s.http) // HTTP/2 for the gRPC binding
	return s, nil
}

// Handler returns the server's HTTP handler (for tests and for mounting it
// in a server of one's own; Serve serves it).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Start takes the silo's lease, fails the tasks of silos that are gone,
// and follows departures and cancel requests until Close.
func (s *Server) Start(ctx context.Context) error {
	if err := s.startLease(ctx); err != nil {
		return err
	}
	s.bg.Add(1)
	go s.watchCtl()
	return nil
}

// Serve serves HTTP (HTTPS with the gateway's certificate) on lis until
// Close, and returns nil then. It refuses a non-loopback listener when
// callers are not authenticated, unless the config is Insecure.
func (s *Server) Serve(lis net.Listener) error {
	if _, ok := lis.Addr().(*net.TCPAddr); ok && !s.cfg.Insecure && !s.auth.Enabled() {
		if err := auth.CheckLoopback("a2a", lis.Addr().String()); err != nil {
			return err
		}
	}
	s.logger.Info("a2a serving", "addr", lis.Addr().String(), "tls", s.http.TLSConfig != nil, "authenticated", s.auth.Enabled())
	if s.http.TLSConfig != nil {
		lis = tls.NewListener(lis, s.http.TLSConfig)
	}
	if err := s.http.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close shuts the server down: new messages are refused, the executions
// running here may finish until ctx ends, then their turns are cancelled
// (the tasks fail with the reason), the streams end, and the lease is
// revoked, so the other silos fail whatever was left.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(ctx) })
	return s.closeErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	// The executions get two thirds of the time left: the silo's other
	// parts close after this, within the same deadline.
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
		errOut = fmt.Errorf("a2a: close: executions still running at the deadline: their tasks fail: %w", wait.Err())
		s.turns.all(errShutdown)
		t := time.NewTimer(max(time.Until(deadlineOr(ctx, time.Now().Add(5*time.Second))), 0))
		select {
		case <-done:
		case <-t.C:
			s.cancelHard()
			<-done
		}
		t.Stop()
	}
	s.cancelHard()
	s.cancelBase()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.http.Close()
	}
	s.grpc.Stop()
	if l := s.lease.Load(); l != 0 {
		if _, err := s.cli.Revoke(sctx, clientv3.LeaseID(l)); err != nil {
			s.logger.Warn("a2a: revoking the lease", "err", err)
		}
	}
	s.bg.Wait()
	return errOut
}

// deadlineOr is ctx's deadline, or def without one.
func deadlineOr(ctx context.Context, def time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return def
}
