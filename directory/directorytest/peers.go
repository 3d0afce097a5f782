// Package directorytest starts the outside peers that tests of the
// service directory list and call: an A2A agent built with the official
// a2a-go SDK and an MCP server built with the MCP Go SDK, each a real HTTP
// server on 127.0.0.1 that counts its requests.
//
//	agent := directorytest.StartA2A(t)   // its card at agent.URL/.well-known/agent-card.json
//	tools := directorytest.StartMCP(t)   // streamable HTTP at tools.URL
package directorytest

import (
	"context"
	"iter"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Peer is an outside server on 127.0.0.1, stopped at the test's end.
type Peer struct {
	// URL is its base URL, http://127.0.0.1:port.
	URL      string
	srv      *http.Server
	requests atomic.Int64
	mu       sync.Mutex
	auth     string
}

func start(t testing.TB, h func(p *Peer) http.Handler) *Peer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Peer{URL: "http://" + lis.Addr().String()}
	inner := h(p)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		p.mu.Lock()
		p.auth = r.Header.Get("Authorization")
		p.mu.Unlock()
		inner.ServeHTTP(w, r)
	})}
	go p.srv.Serve(lis)
	t.Cleanup(p.Stop)
	return p
}

// Stop closes the server and its connections: the peer is down.
func (p *Peer) Stop() { p.srv.Close() }

// Requests is the number of requests it got.
func (p *Peer) Requests() int64 { return p.requests.Load() }

// LastAuth is the Authorization header of the last request.
func (p *Peer) LastAuth() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.auth
}

// StartA2A starts an outside A2A agent, "weather": its card (one skill,
// forecast, tagged weather) at the well-known path, JSON-RPC at its root;
// it answers a message TEXT with "forecast for TEXT: sunny".
func StartA2A(t testing.TB) *Peer {
	return start(t, func(p *Peer) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/.well-known/agent-card.json", a2asrv.NewAgentCardHandler(a2asrv.AgentCardProducerFn(func(context.Context) (*spec.AgentCard, error) {
			return &spec.AgentCard{
				Name:        "weather",
				Description: "Weather reports from an outside agent.",
				Version:     "1",
				SupportedInterfaces: []*spec.AgentInterface{
					{URL: p.URL, ProtocolBinding: spec.TransportProtocolJSONRPC, ProtocolVersion: spec.Version},
				},
				DefaultInputModes:  []string{"text/plain"},
				DefaultOutputModes: []string{"text/plain"},
				Skills: []spec.AgentSkill{{
					ID: "forecast", Name: "forecast", Description: "Tells the weather forecast for a city.",
					Tags: []string{"weather"}, Examples: []string{"will it rain in Lisbon tomorrow"},
				}},
			}, nil
		})))
		mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(forecaster{})))
		return mux
	})
}

// forecaster is the A2A agent's executor.
type forecaster struct{}

func (forecaster) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		text := ""
		for _, p := range ec.Message.Parts {
			if s, ok := p.Content.(spec.Text); ok {
				text += string(s)
			}
		}
		yield(spec.NewMessage(spec.MessageRoleAgent, spec.NewTextPart("forecast for "+text+": sunny")), nil)
	}
}

func (forecaster) Cancel(context.Context, *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(func(spec.Event, error) bool) {}
}

// StartMCP starts an outside MCP server (streamable HTTP at its root) with
// one tool, read_file, which answers {"path": P} with "contents of P".
func StartMCP(t testing.TB) *Peer {
	return start(t, func(*Peer) http.Handler {
		s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "files", Version: "1"}, nil)
		type in struct {
			Path string `json:"path" jsonschema:"the file's path in the archive"`
		}
		mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "read_file", Description: "Reads a text file from the shared archive."},
			func(_ context.Context, _ *mcpsdk.CallToolRequest, a in) (*mcpsdk.CallToolResult, any, error) {
				return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "contents of " + a.Path}}}, nil, nil
			})
		return mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, &mcpsdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	})
}
