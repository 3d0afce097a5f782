package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentsilo/agentsilo/cluster"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/demoagents"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
	"github.com/agentsilo/agentsilo/internal/testutil"
	"github.com/agentsilo/agentsilo/mcp/mcptest"
)

// TestMain checks that no test leaves a goroutine behind once its silos
// closed (they close at each test's cleanup, after the test's own defers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.LeakOptions()...)
}

// startSilo starts an in-process silo with the demo and test agents and
// MCP on a free loopback port, on the etcd of e under prefix; configure
// may adjust its config. It is closed at the test's end.
func startSilo(t *testing.T, e *etcdtest.Server, name, prefix string, configure func(*cluster.SiloConfig)) *cluster.Silo {
	t.Helper()
	reg := grain.NewRegistry()
	if err := demoagents.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := mcptest.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultSiloConfig()
	cfg.Name = name
	cfg.GatewayAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	cfg.Etcd = etcdstore.Config{Endpoints: []string{e.Endpoint()}, Prefix: prefix}
	cfg.Logger = testutil.Logger()
	cfg.MCP.Addr = "127.0.0.1:0"
	if configure != nil {
		configure(&cfg)
	}
	s, err := cluster.NewSilo(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil && !closedEarly[s] {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return s
}

// closedEarly marks the silos a test closed itself, whose Close error
// the test judged.
var closedEarly = map[*cluster.Silo]bool{}

// keyHash is the hex SHA-256 of an API key, as the key file holds it.
func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// headers is an http.RoundTripper adding fixed headers (a principal, a key).
type headers struct {
	base http.RoundTripper
	h    map[string]string
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// progress collects the progress notifications a client receives.
type progress struct {
	mu   sync.Mutex
	msgs []string
	seen chan string
}

func newProgress() *progress { return &progress{seen: make(chan string, 100)} }

func (p *progress) handle(_ context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.mu.Unlock()
	select {
	case p.seen <- req.Params.Message:
	default:
	}
}

func (p *progress) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.msgs...)
}

// connect opens an MCP session with the Go SDK's client to path on the
// silo's MCP server, sending hdr; it is closed at the test's end.
func connect(t *testing.T, s *cluster.Silo, path string, hdr map[string]string, p *progress) (*mcpsdk.ClientSession, error) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	opts := &mcpsdk.ClientOptions{}
	if p != nil {
		opts.ProgressNotificationHandler = p.handle
	}
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentsilo-test", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &mcpsdk.StreamableClientTransport{
		Endpoint:             "http://" + s.MCPAddr() + path,
		HTTPClient:           &http.Client{Transport: headers{base: tr, h: hdr}},
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

// mustConnect is connect that fails the test on an error.
func mustConnect(t *testing.T, s *cluster.Silo, path string, hdr map[string]string, p *progress) *mcpsdk.ClientSession {
	t.Helper()
	cs, err := connect(t, s, path, hdr, p)
	if err != nil {
		t.Fatalf("connect %s: %v", path, err)
	}
	return cs
}

// rpcCode is the JSON-RPC error code of err, or 0.
func rpcCode(err error) int64 {
	var e *jsonrpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// texts returns the text contents of a result.
func texts(res *mcpsdk.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

// dev declares the principal dev (no authentication configured).
var dev = map[string]string{"x-agentsilo-principal": "dev"}
