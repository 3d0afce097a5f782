package etcdstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/etcderr"
)

// Config says where a silo keeps its durable state: an external etcd
// cluster (Endpoints) or, with no endpoints, an etcd embedded in the silo.
type Config struct {
	// Endpoints of an external etcd cluster (--etcd-endpoints). Empty: start
	// an embedded etcd.
	Endpoints []string
	// DataDir holds the embedded etcd's data (--data-dir); unused with
	// Endpoints. Default: "./data".
	DataDir string
	// EmbeddedAddr is the client address of the embedded etcd
	// (--embedded-etcd-addr), so that further local silos can point
	// --etcd-endpoints at it. Default: 127.0.0.1:2379.
	EmbeddedAddr string
	// EmbeddedPeerAddr is the embedded etcd's raft peer address, which no
	// other member uses but etcd must listen on. Default: EmbeddedAddr's host
	// with the port after EmbeddedAddr's (127.0.0.1:2380 by default).
	EmbeddedPeerAddr string
	// Prefix is put before every key agentsilo writes (--etcd-prefix).
	// Default: "/agentsilo/". It always ends in "/".
	Prefix string
	// DialTimeout, if positive, makes Start wait that long for external
	// endpoints to answer a first read, and fail without one, saying why
	// (each endpoint's dial error, or etcd's refusal). A silo cannot join
	// its cluster without etcd, so the silo's default waits: DefaultConfig:
	// 10 s. 0: do not wait (calls that need etcd return Unavailable until
	// the client connects).
	DialTimeout time.Duration
	// CAFile, CertFile and KeyFile secure the connection to an external etcd
	// with TLS (--etcd-ca, --etcd-cert, --etcd-key): CAFile verifies etcd's
	// certificate (default: the system's roots), CertFile and KeyFile are
	// the client certificate etcd may require (--client-cert-auth). Any of
	// them turns TLS on; an endpoint without a scheme is then reached over
	// TLS too.
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate the silo to an external etcd with
	// auth enabled (--etcd-user; the password from SILO_ETCD_PASSWORD or
	// --etcd-password-file).
	Username, Password string
	// Logger receives the etcd logs worth seeing (warnings and errors).
	// Default: slog.Default().
	Logger *slog.Logger
	// CompactInterval is how often the silo compacts etcd's history, up to
	// the revision etcd had one interval before (--etcd-compact-interval;
	// see compact.go). 0: never (an embedded etcd still compacts hourly).
	// DefaultConfig: 5 min.
	CompactInterval time.Duration

	// clk times the compactor (nil: the real clock); this package's tests
	// set it. A caller that wants another schedule sets CompactInterval to
	// 0 and calls Store.CompactOnce.
	clk clock.Clock
}

// DefaultDialTimeout is how long Start waits for an external etcd to
// answer (Config.DialTimeout).
const DefaultDialTimeout = 10 * time.Second

// DefaultConfig returns the single-machine defaults: an embedded etcd in
// ./data serving 127.0.0.1:2379.
func DefaultConfig() Config {
	return Config{
		DataDir:      "./data",
		EmbeddedAddr: "127.0.0.1:2379",
		Prefix:       "/agentsilo/",
		DialTimeout:  DefaultDialTimeout,

		CompactInterval: DefaultCompactInterval,
	}
}

func (c *Config) fill() error {
	d := DefaultConfig()
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.EmbeddedAddr == "" {
		c.EmbeddedAddr = d.EmbeddedAddr
	}
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CompactInterval < 0 {
		return errs.New(codes.InvalidArgument, "etcdstore: compact interval %v must not be negative (0: never)", c.CompactInterval)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errs.New(codes.InvalidArgument, "etcdstore: an etcd client certificate and its key go together (--etcd-cert, --etcd-key)")
	}
	if (c.Username == "") != (c.Password == "") {
		return errs.New(codes.InvalidArgument, "etcdstore: an etcd user needs a password and a password a user (--etcd-user, SILO_ETCD_PASSWORD or --etcd-password-file)")
	}
	if len(c.Endpoints) > 0 {
		return nil
	}
	if c.secured() {
		return errs.New(codes.InvalidArgument, "etcdstore: etcd TLS and user are for an external etcd (--etcd-endpoints); the embedded one serves its silo on %s without them", c.EmbeddedAddr)
	}
	host, port, err := net.SplitHostPort(c.EmbeddedAddr)
	if err != nil {
		return errs.New(codes.InvalidArgument, "etcdstore: embedded etcd address %q: %w", c.EmbeddedAddr, err)
	}
	if c.EmbeddedPeerAddr == "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p >= 65535 {
			return errs.New(codes.InvalidArgument, "etcdstore: embedded etcd address %q: bad port", c.EmbeddedAddr)
		}
		c.EmbeddedPeerAddr = net.JoinHostPort(host, strconv.Itoa(p+1))
	}
	if _, _, err := net.SplitHostPort(c.EmbeddedPeerAddr); err != nil {
		return errs.New(codes.InvalidArgument, "etcdstore: embedded etcd peer address %q: %w", c.EmbeddedPeerAddr, err)
	}
	return nil
}

// Store is a silo's connection to etcd, and the embedded etcd server when it
// runs one. Its client reconnects by itself: while etcd is unreachable, calls
// through it fail (see etcderr.Wrap, which maps those failures to
// Unavailable) and nothing else of the silo stops.
type Store struct {
	cfg    Config
	server *embed.Etcd // nil with external endpoints
	client *clientv3.Client

	compactStop context.CancelFunc // nil without a compactor
	compactDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
	serverOnce  sync.Once // embed.Etcd.Close is not idempotent
	closing     atomic.Bool
	stop        chan struct{}
	watcher     sync.WaitGroup
}

// Start connects to etcd as cfg says. With no Endpoints it first starts
// an embedded etcd in cfg.DataDir and waits, bounded by ctx, until it serves.
// Close releases everything Start started.
func Start(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	e := &Store{cfg: cfg, stop: make(chan struct{})}
	endpoints := cfg.Endpoints
	if len(endpoints) == 0 {
		if err := e.startEmbedded(ctx); err != nil {
			return nil, err
		}
		endpoints = []string{"http://" + cfg.EmbeddedAddr}
	}
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		e.stopEmbedded()
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Context:   context.Background(), // the client outlives Start's ctx
		Endpoints: endpoints,
		TLS:       tlsConfig,
		Username:  cfg.Username,
		Password:  cfg.Password,
		// Keepalives notice a dead connection, so the client redials.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               quietZap(),
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(reconnectParams)},
	})
	if err != nil {
		e.stopEmbedded()
		return nil, etcderr.FromCall(ctx, err, "connect to etcd %v", endpoints)
	}
	e.client = client
	if len(cfg.Endpoints) > 0 && cfg.DialTimeout > 0 {
		if err := e.reach(ctx, endpoints); err != nil {
			client.Close()
			return nil, err
		}
	}
	e.startCompactor()
	return e, nil
}

// reach waits, up to DialTimeout, for etcd to answer a read. Without an
// answer, its error says why: etcd's refusal (authentication, permission),
// or what dialling each endpoint gives (refused, no route, timeout), which
// the client's own error leaves out.
func (e *Store) reach(ctx context.Context, endpoints []string) error {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	defer cancel()
	_, err := e.client.Get(rctx, e.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return etcderr.FromCall(ctx, err, "%s", strings.Join(endpoints, ","))
	}
	if rctx.Err() == nil {
		// etcd answered, with a refusal.
		return etcderr.FromCall(ctx, err, "%s", strings.Join(endpoints, ","))
	}
	var causes []string
	d := net.Dialer{Timeout: time.Second}
	for _, ep := range endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		c, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			causes = append(causes, err.Error())
			continue
		}
		c.Close()
		causes = append(causes, host+" accepts connections but etcd did not answer (TLS or a wrong port?)")
	}
	return errs.New(codes.Unavailable, "%s did not answer within %v: %s", strings.Join(endpoints, ","), e.cfg.DialTimeout, strings.Join(causes, "; "))
}

func (e *Store) startEmbedded(ctx context.Context) error {
	cfg := embed.NewConfig()
	cfg.Name = "agentsilo"
	cfg.Dir = e.cfg.DataDir
	curl, err := url.Parse("http://" + e.cfg.EmbeddedAddr)
	if err != nil {
		return errs.New(codes.InvalidArgument, "etcdstore: embedded etcd address %q: %w", e.cfg.EmbeddedAddr, err)
	}
	purl, err := url.Parse("http://" + e.cfg.EmbeddedPeerAddr)
	if err != nil {
		return errs.New(codes.InvalidArgument, "etcdstore: embedded etcd peer address %q: %w", e.cfg.EmbeddedPeerAddr, err)
	}
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// etcd logs every routine step at info and much at warn (file modes,
	// request stats); the silo's log keeps etcd's errors, and none of the
	// ones its own shutdown causes.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(&slogCore{
		LevelEnabler: zapcore.ErrorLevel,
		logger:       e.cfg.Logger.With("lib", "etcd"),
		closing:      &e.closing,
	}))
	// The embedded store holds small records that are rewritten rarely;
	// compact hourly so that its history stays small.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdstore: start embedded etcd in %s on %s: %w", e.cfg.DataDir, e.cfg.EmbeddedAddr, err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("etcdstore: embedded etcd in %s: %w", e.cfg.DataDir, err)
	case <-ctx.Done():
		srv.Close()
		return fmt.Errorf("etcdstore: embedded etcd in %s not ready: %w", e.cfg.DataDir, ctx.Err())
	}
	e.server = srv
	e.watcher.Add(1)
	go e.watchServer()
	e.cfg.Logger.Info("embedded etcd serving", "addr", e.cfg.EmbeddedAddr, "data_dir", e.cfg.DataDir)
	return nil
}

// watchServer logs a failure of the embedded server. The silo goes on: calls
// that need etcd return Unavailable.
func (e *Store) watchServer() {
	defer e.watcher.Done()
	select {
	case err, ok := <-e.server.Err():
		if ok && err != nil {
			e.cfg.Logger.Error("embedded etcd failed; calls that need etcd return Unavailable", "err", err)
		}
	case <-e.stop:
	}
}

func (e *Store) stopEmbedded() {
	close(e.stop)
	e.stopServer()
	e.watcher.Wait()
}

func (e *Store) stopServer() {
	e.serverOnce.Do(func() {
		e.closing.Store(true)
		if e.server != nil {
			// Raft and the lessor stop first. Close alone would first wait
			// (up to its request timeout, 7 s) for the clients' watch
			// streams to end, while no keepalive got through any more and
			// the lessor went on expiring leases: every other silo's, whose
			// records it deleted before their eyes, so they fenced. Stopped
			// first, the lessor expires nothing, and a restarted etcd
			// gives every lease its full TTL again.
			e.server.Server.HardStop()
			e.server.Close()
		}
	})
}

// Client returns the etcd client. It is safe for concurrent use and valid
// until Close.
func (e *Store) Client() *clientv3.Client { return e.client }

// Prefix returns the key prefix, ending in "/".
func (e *Store) Prefix() string { return e.cfg.Prefix }

// Embedded reports whether this silo runs the etcd server it uses.
func (e *Store) Embedded() bool { return e.server != nil }

// Close closes the client and stops the embedded server, if any. It may be
// called more than once.
func (e *Store) Close() error {
	e.closeOnce.Do(func() {
		e.stopCompactor()
		if err := e.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			e.closeErr = err
		}
		e.stopEmbedded()
	})
	return e.closeErr
}

// reconnectParams is how the etcd client redials a lost etcd: quickly at
// first, then every 3 s at most (gRPC's default grows to 2 min, too slow for a
// silo waiting to resume).
var reconnectParams = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   3 * time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}

// quietZap is the etcd client's logger: warnings and errors to stderr.
func quietZap() *zap.Logger {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	zc.Sampling = nil
	lg, err := zc.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

// slogCore passes the embedded etcd's zap logs to the silo's slog logger,
// until the server is being closed.
type slogCore struct {
	zapcore.LevelEnabler
	logger  *slog.Logger
	closing *atomic.Bool
	fields  []zapcore.Field
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	d := *c
	d.fields = append(append([]zapcore.Field(nil), c.fields...), fs...)
	return &d
}

func (c *slogCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) && !c.closing.Load() {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *slogCore) Write(ent zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	level := slog.LevelError
	if ent.Level < zapcore.ErrorLevel {
		level = slog.LevelWarn
	}
	c.logger.Log(context.Background(), level, ent.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// secured reports whether c asks for TLS or a user.
func (c *Config) secured() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.Username != ""
}

// tlsConfig is the client's TLS configuration, or nil without TLS.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "etcdstore: etcd CA: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errs.New(codes.InvalidArgument, "etcdstore: etcd CA %s holds no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, errs.New(codes.InvalidArgument, "etcdstore: etcd client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
