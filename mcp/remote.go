package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/outbound"
)

// RemoteType is the built-in agent type whose agents are MCP servers
// outside the cluster (or another silo's MCP endpoint): an agent of it,
// configured by CreateAgent with the server's URL, lists the server's
// tools and calls them for whoever asks it, so any agent or client uses,
// say, MCP:system:github like any other agent:
//
//	message_type "tools/list"            reply: the tools, as JSON data
//	                                     ({"tools": [...]}) and one line
//	                                     per tool as text
//	message_type "tools/call"            data {"name": tool, "arguments": {...}}
//	message_type <a tool's name>         data: the tool's JSON arguments
//
// A call's reply carries the tool's text content as its message and its
// structured content as JSON data; a result flagged isError fails the Ask
// (Unknown, with the tool's text).
const RemoteType = "MCP"

// The configuration keys of an agent of RemoteType (CreateAgent's config).
// The credentials are sent with every request to the server, and to no
// other host (redirects elsewhere are refused).
const (
	// RemoteURL is the server's streamable HTTP endpoint, e.g.
	// https://mcp.example.com/mcp.
	RemoteURL = "url"
	// RemoteAPIKey is sent as the x-api-key header.
	RemoteAPIKey = "api_key"
	// RemoteBearerToken is sent as "Authorization: Bearer <token>".
	RemoteBearerToken = "bearer_token"
	// RemoteHeaderPrefix starts keys of further headers: header.X-Tenant=acme.
	RemoteHeaderPrefix = "header."
	// RemoteCommand names, instead of a URL, a stdio server among
	// RemoteOptions.Commands (which only the program sets).
	RemoteCommand = "command"
	// RemoteDelegate "true" sends, with every request, a token the
	// cluster signs for the user the call is made for (its on-behalf-of
	// principal), with the server's URL as its audience and the agent as
	// its actor, as "Authorization: Bearer" (instead of bearer_token):
	// the server verifies it with the keys the cluster publishes
	// (RemoteOptions.Delegate; the silo's --delegation-key). Each user
	// then has a session of their own with the server. A tool call's
	// token carries the scopes of the tool (RemoteScopesPrefix), and no
	// others; the session's other requests carry none. Without
	// RemoteOptions.Delegate the silo refuses the agent's calls
	// (FailedPrecondition).
	RemoteDelegate = "delegate"
	// RemoteScopesPrefix starts keys that declare the scopes a delegated
	// token carries for a call of a tool: scopes.create_issue="repo:write".
	// Without such a key they are those the directory's entry declares
	// for the tool (a pinned skill of its name; RemoteOptions.SkillScopes),
	// else none.
	RemoteScopesPrefix = "scopes."
)

// The message types an agent of RemoteType understands besides a tool's
// name.
const (
	// RemoteListTools lists the server's tools.
	RemoteListTools = "tools/list"
	// RemoteCallTool calls the tool its JSON data names, with arguments.
	RemoteCallTool = "tools/call"
)

// MetaIdempotencyKey is the key, in the _meta of the tools/call requests an
// agent of RemoteType sends, of the idempotency key of the Ask that made
// the call (the message's IdempotencyKey), when it has one: a call sent
// again with the same key (a retry after a crash) is one the server may
// run once.
const MetaIdempotencyKey = "agentsilo/idempotency-key"

// RemoteOptions configures the MCP agent type.
type RemoteOptions struct {
	// AllowPrivateNetworks lets servers be on loopback, private and
	// link-local addresses. Default: refused, as for the A2A agent type
	// (a caller could otherwise reach the silo's own network). A silo
	// sets it from --mcp-allow-private-networks, on its own: the A2A
	// flag does not lift it.
	AllowPrivateNetworks bool
	// Resolve, if set, gives the endpoint of an agent MCP:owner:alias that
	// has no configuration of its own (never created with CreateAgent):
	// the server's URL and the headers to send with every request. ok
	// false (with a nil error) means it knows no such server, and the Ask
	// fails as without Resolve (FailedPrecondition); an error fails the
	// Ask with the error's code. It may be called concurrently.
	Resolve func(ctx context.Context, owner, alias string) (url string, headers map[string]string, ok bool, err error)
	// Version is the client version the agents announce to servers.
	// Default: "dev".
	Version string
	// Commands are the MCP servers on stdio the agents may run, by name:
	// an agent configured with command=NAME (and no url) runs Commands[NAME]
	// (the program and its arguments) as a child process of the silo, one
	// per activation, and speaks MCP on its stdin and stdout. Off by
	// default (nil). The risk: the process runs with the silo's user,
	// files and network, out of the reach of the SSRF guard, for whoever
	// may create such an agent; so the program fixes the command lines
	// here, and a configuration can only name one of them.
	Commands map[string][]string
	// Delegate, if set, makes the token an agent configured with
	// RemoteDelegate sends for the principal its call is made for, to
	// audience (the server's URL), as actor, with scopes
	// (auth.Delegator.Token). It may be called concurrently.
	Delegate func(principal, audience, actor string, scopes []string) (string, error)
	// SkillScopes, if set, gives the scopes a delegated token carries for
	// a call of tool (skill) of an agent MCP:owner:alias that Resolve
	// gave (the directory entry's pinned skills); ok false: none. It may
	// be called concurrently.
	SkillScopes func(ctx context.Context, owner, alias, skill string) (scopes []string, ok bool)
}

// Bounds of what a server's answers may make an agent hold.
const (
	// remoteMaxUsers bounds the sessions a delegating agent keeps, one
	// per user it called the server for; the least recently used ends.
	remoteMaxUsers = 16
	// remoteMaxPages bounds the pages of one tools/list.
	remoteMaxPages = 100
	// remoteMaxTools bounds the tools of one tools/list.
	remoteMaxTools = 10000
	// remoteMaxEvent bounds one server-sent event (a result).
	remoteMaxEvent = 16 << 20
)

// RegisterRemote registers RemoteType in reg.
func RegisterRemote(reg *grain.Registry, opts RemoteOptions) error {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	base := outbound.Transport(opts.AllowPrivateNetworks)
	return reg.Register(RemoteType, func(h grain.Host) (grain.Agent, error) {
		return &remoteAgent{h: h, opts: opts, base: base}, nil
	}, grain.TypeInfo{
		Description: "An MCP server outside the cluster: its configuration (url, and api_key, bearer_token or header.* credentials) names it; ask it tools/list for its tools, or a tool's name with the JSON arguments as data to call it.",
		Skills: []grain.Skill{
			grain.TypedSkill[struct{}, remoteToolList](RemoteListTools,
				"List the MCP server's tools: names, descriptions, input and output schemas (JSON data {\"tools\": [...]}).",
				"mcp", "tools"),
			grain.TypedSkill[remoteCall, any](RemoteCallTool,
				"Call a tool of the MCP server: data {\"name\": tool, \"arguments\": {...}} (or message_type = the tool's name and data = its arguments); the reply is the tool's text and structured content.",
				"mcp", "tools", "proxy"),
		},
	})
}

// remoteCall is the data of a tools/call request.
type remoteCall struct {
	Name      string         `json:"name" jsonschema:"the name of the tool to call"`
	Arguments map[string]any `json:"arguments,omitempty" jsonschema:"the tool's arguments"`
}

// remoteToolList is the data of a tools/list reply.
type remoteToolList struct {
	Tools []remoteTool `json:"tools"`
}

// remoteAgent is an agent of RemoteType: one MCP client session per
// activation, made at its first message and again after the server lost
// it. Its turns run one at a time, so its fields need no lock.
type remoteAgent struct {
	h       grain.Host
	opts    RemoteOptions
	base    http.RoundTripper
	session *mcpsdk.ClientSession
	url     string
	// user is the principal session is for, with a delegating agent (""
	// for none); idle are the sessions of the other users it called for,
	// least recently used first.
	user string
	idle []userSession
	// delegates, scopes and resolved are what the configuration says of
	// delegated tokens (see RemoteDelegate): whether to send them, the
	// scopes of a call per tool, and whether Resolve gave the endpoint.
	delegates bool
	scopes    map[string][]string
	resolved  bool
	// last is what the last failed request to the server got, to give
	// errors their codes.
	last remoteLast
}

// remoteLast is the outcome of the last failed HTTP request of an agent:
// the SDK reports transport failures as text.
type remoteLast struct {
	status atomic.Int32          // an HTTP status ≥ 400, or 0
	err    atomic.Pointer[error] // a transport error, or nil
}

func (l *remoteLast) reset() {
	l.status.Store(0)
	l.err.Store(nil)
}

// isAnswer reports whether err is the server's JSON-RPC error answer (not
// the SDK's own "rejected by transport").
func isAnswer(err error) (*jsonrpc.Error, bool) {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && wire.Code != remoteCodeRejected {
		return wire, true
	}
	return nil, false
}

// remoteCodeRejected is the code of the SDK's error for a request its
// transport could not deliver.
const remoteCodeRejected = -32005

// OnMessage implements grain.Agent.
func (r *remoteAgent) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	if m.Kind != grain.KindRequest {
		return nil, nil // a one-way message has no one to answer
	}
	ctx = remoteWithTrace(ctx)
	if r.session == nil && len(r.idle) == 0 {
		// The configuration says whether the agent delegates.
		if _, _, _, err := r.endpoint(ctx); err != nil {
			return nil, err
		}
	}
	r.forUser(m.OnBehalfOf)
	switch mt := m.MessageType; mt {
	case RemoteListTools:
		return r.listTools(ctx, m)
	case RemoteCallTool:
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		// The runtime checked the data against the skill's schema when
		// it came from outside; an agent's Ask was not checked.
		if err := json.Unmarshal(m.Data, &c); err != nil || c.Name == "" {
			return nil, errs.New(codes.InvalidArgument, "%s: %s takes JSON data {\"name\": tool, \"arguments\": {...}}", r.h.Address(), RemoteCallTool)
		}
		return r.callTool(ctx, m, c.Name, c.Arguments)
	case "":
		return nil, errs.New(codes.InvalidArgument, "%s: say what to do in message_type: %s, %s, or a tool's name with its JSON arguments as data", r.h.Address(), RemoteListTools, RemoteCallTool)
	default:
		return r.callTool(ctx, m, mt, m.Data)
	}
}

// userSession is a delegating agent's session for one user.
type userSession struct {
	user    string
	session *mcpsdk.ClientSession
}

// OnDeactivate implements grain.Deactivator: the sessions end.
func (r *remoteAgent) OnDeactivate(context.Context, grain.Reason) {
	r.drop()
	for _, u := range r.idle {
		_ = u.session.Close() // the server may be gone: nothing to do about it
	}
	r.idle = nil
}

// forUser makes the session the one for principal (made at its first
// request), when the agent delegates: the session of another user waits
// among the idle ones.
func (r *remoteAgent) forUser(principal string) {
	if !r.delegates || principal == r.user {
		return
	}
	if r.session != nil {
		if len(r.idle) == remoteMaxUsers {
			_ = r.idle[0].session.Close()
			r.idle = slices.Delete(r.idle, 0, 1)
		}
		r.idle = append(r.idle, userSession{r.user, r.session})
	}
	r.session, r.user = nil, principal
	for i, u := range r.idle {
		if u.user == principal {
			r.session = u.session
			r.idle = slices.Delete(r.idle, i, i+1)
			break
		}
	}
}

// drop closes the session, if any.
func (r *remoteAgent) drop() {
	if r.session != nil {
		_ = r.session.Close() // the server may be gone: nothing to do about it
		r.session = nil
	}
}

// remoteTool is a tool as tools/list replies with it.
type remoteTool struct {
	Name         string `json:"name"`
	Title        string `json:"title,omitempty"`
	Description  string `json:"description,omitempty"`
	InputSchema  any    `json:"inputSchema,omitempty" jsonschema:"the tool's input JSON Schema"`
	OutputSchema any    `json:"outputSchema,omitempty" jsonschema:"the tool's output JSON Schema, if it has one"`
}

func (r *remoteAgent) listTools(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	var tools []remoteTool
	err := r.withSession(ctx, true, func(s *mcpsdk.ClientSession) error {
		tools = tools[:0]
		params := &mcpsdk.ListToolsParams{}
		for page := 0; ; page++ {
			if page == remoteMaxPages {
				return errs.New(codes.ResourceExhausted, "more than %d pages of tools", remoteMaxPages)
			}
			res, err := s.ListTools(ctx, params)
			if err != nil {
				return err
			}
			for _, t := range res.Tools {
				if len(tools) == remoteMaxTools {
					return errs.New(codes.ResourceExhausted, "more than %d tools", remoteMaxTools)
				}
				tools = append(tools, remoteTool{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema})
			}
			if res.NextCursor == "" {
				return nil
			}
			params.Cursor = res.NextCursor
		}
	})
	if err != nil {
		return nil, err
	}
	if tools == nil {
		tools = []remoteTool{}
	}
	data, err := json.Marshal(remoteToolList{tools})
	if err != nil {
		return nil, errs.New(codes.Internal, "%s: encode the tools: %w", r.h.Address(), err)
	}
	var text strings.Builder
	for _, t := range tools {
		text.WriteString(t.Name)
		if t.Description != "" {
			text.WriteString(": " + firstLine(t.Description))
		}
		text.WriteByte('\n')
	}
	reply := m.Response()
	reply.Message, reply.Data, reply.DataType = strings.TrimSuffix(text.String(), "\n"), data, grain.JSONType
	return reply, nil
}

func (r *remoteAgent) callTool(ctx context.Context, m *grain.Message, name string, args json.RawMessage) (*grain.Message, error) {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, errs.New(codes.InvalidArgument, "%s: the arguments of tool %q must be a JSON object", r.h.Address(), clientClip(name))
	}
	if r.delegates {
		ctx = context.WithValue(ctx, scopesKey{}, r.toolScopes(ctx, name))
	}
	var res *mcpsdk.CallToolResult
	// A call is sent again only on a session the server no longer knows
	// (it answered 404 and did not run it).
	err := r.withSession(ctx, false, func(s *mcpsdk.ClientSession) error {
		var err error
		params := &mcpsdk.CallToolParams{Name: name, Arguments: args}
		if k := m.IdempotencyKey; k != "" {
			params.Meta = mcpsdk.Meta{MetaIdempotencyKey: k}
		}
		if l := m.Label.Name(); l != "" {
			if params.Meta == nil {
				params.Meta = mcpsdk.Meta{}
			}
			params.Meta[grain.LabelKey] = l
		}
		res, err = s.CallTool(ctx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The server's result is tool output from outside the cluster,
	// whatever its _meta claims (a lower label than tool-output is none).
	reply := m.Response()
	reply.Label, reply.Outside = grain.LabelToolOutput, true
	var texts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcpsdk.TextContent:
			texts = append(texts, c.Text)
		case *mcpsdk.ImageContent:
			setData(reply, c.Data, c.MIMEType)
		case *mcpsdk.AudioContent:
			setData(reply, c.Data, c.MIMEType)
		case *mcpsdk.ResourceLink:
			reply.Files = append(reply.Files, c.URI)
		case *mcpsdk.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			if c.Resource.Text != "" {
				texts = append(texts, c.Resource.Text)
			} else if c.Resource.Blob != nil {
				setData(reply, c.Resource.Blob, c.Resource.MIMEType)
			} else {
				reply.Files = append(reply.Files, c.Resource.URI)
			}
		}
	}
	reply.Message = strings.Join(texts, "\n")
	if res.IsError {
		why := reply.Message
		if why == "" {
			why = "no message"
		}
		return nil, errs.New(codes.Unknown, "tool %q of the MCP server %s reported an error: %s", clientClip(name), r.url, clientClip(why))
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, errs.New(codes.Internal, "%s: encode the structured content: %w", r.h.Address(), err)
		}
		reply.Data, reply.DataType = b, grain.JSONType
	}
	return reply, nil
}

// setData makes data the reply's data unless it has some.
func setData(reply *grain.Message, data []byte, mimeType string) {
	if reply.Data != nil {
		return
	}
	if mimeType == "" {
		mimeType = "application/octet-stream"
	}
	reply.Data, reply.DataType = data, mimeType
}

// withSession runs op on the activation's session, connecting first if it
// has none. A session that failed for something else than an answer of
// the server (a JSON-RPC error) is dropped and made again: at once, with
// op run once more, when the server answered 404 for the session (it
// restarted or ended the session, and did not run the request) or when
// retry (op is safe to repeat); else at the next message.
func (r *remoteAgent) withSession(ctx context.Context, retry bool, op func(*mcpsdk.ClientSession) error) error {
	for attempt := 0; ; attempt++ {
		if err := r.connect(ctx); err != nil {
			return err
		}
		r.last.reset()
		err := op(r.session)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return r.fail(ctx, err)
		}
		if _, ok := isAnswer(err); ok {
			return r.fail(ctx, err) // the server answered: the session is fine
		}
		var own *errs.Error
		if errors.As(err, &own) {
			return err // the agent's own (a bound on the listing)
		}
		lost := errors.Is(err, mcpsdk.ErrSessionMissing)
		r.drop()
		if attempt > 0 || !lost && !retry {
			return r.fail(ctx, err)
		}
		r.h.Logger().DebugContext(ctx, "mcp: the server lost the session; making a new one", "agent", r.h.Address(), "err", err)
	}
}

// connect makes the session, once per activation (and again after drop).
func (r *remoteAgent) connect(ctx context.Context) error {
	if r.session != nil {
		return nil
	}
	u, headers, argv, err := r.endpoint(ctx)
	if err != nil {
		return err
	}
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentsilo", Version: r.opts.Version}, &mcpsdk.ClientOptions{Capabilities: &mcpsdk.ClientCapabilities{}})
	r.last.reset()
	if argv != nil {
		r.url = "command " + argv[0]
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // not the silo's secrets
		s, err := c.Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("start: %w", err))
		}
		r.session = s
		return nil
	}
	tr := &remoteHeaders{base: r.base, headers: headers, last: &r.last}
	if r.delegates && r.user != "" {
		tr.headers.Del("Authorization") // the user's token, not a configured one
		tr.user, tr.audience, tr.actor, tr.delegate = r.user, u, r.h.Address().String(), r.opts.Delegate
	}
	hc := &http.Client{
		Transport: tr,
		// Credentials go to the configured host only.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 || req.URL.Host != via[0].URL.Host {
				return errors.New("mcp: redirect to another host refused")
			}
			return nil
		},
	}
	t := &mcpsdk.StreamableClientTransport{
		Endpoint:   u,
		HTTPClient: hc,
		MaxRetries: -1, // a lost stream fails the call: the Ask's caller decides
		// Replies come on each request's own stream; a standing GET
		// stream per activation would hold a connection for nothing.
		DisableStandaloneSSE: true,
		MaxEventSize:         remoteMaxEvent,
	}
	r.url = u
	s, err := c.Connect(ctx, t, nil)
	if err != nil {
		return r.fail(ctx, fmt.Errorf("connect: %w", err))
	}
	r.session = s
	return nil
}

// endpoint reads the agent's configuration (or asks Resolve for it): the
// server's URL and the headers to send, or the command line of a stdio
// server.
func (r *remoteAgent) endpoint(ctx context.Context) (string, http.Header, []string, error) {
	cfg, err := r.h.Config(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	if len(cfg) == 0 && r.opts.Resolve != nil {
		u, hdrs, ok, err := r.opts.Resolve(ctx, r.h.Address().Owner, r.h.Address().Alias)
		if err != nil {
			return "", nil, nil, errs.Wrap(errs.Code(err), err, "%s: resolve", r.h.Address())
		}
		if ok {
			cfg = map[string]string{RemoteURL: u}
			for k, v := range hdrs {
				cfg[RemoteHeaderPrefix+k] = v
			}
			r.resolved = true
		}
	}
	r.delegates = cfg[RemoteDelegate] == "true"
	r.scopes = map[string][]string{}
	for k, v := range cfg {
		if tool, ok := strings.CutPrefix(k, RemoteScopesPrefix); ok && tool != "" {
			r.scopes[tool] = strings.Fields(v)
		}
	}
	raw := cfg[RemoteURL]
	if name := cfg[RemoteCommand]; name != "" && raw == "" {
		argv := r.opts.Commands[name]
		if len(argv) == 0 {
			return "", nil, nil, errs.New(codes.FailedPrecondition, "%s: %s %q: the silo runs no such MCP server on stdio (RemoteOptions.Commands)", r.h.Address(), RemoteCommand, clientClip(name))
		}
		return "", nil, argv, nil
	}
	if raw == "" {
		return "", nil, nil, errs.New(codes.FailedPrecondition, "%s has no %s: create it with its MCP server's URL (CreateAgent %s=https://host/mcp)", r.h.Address(), RemoteURL, RemoteURL)
	}
	if r.delegates && r.opts.Delegate == nil {
		return "", nil, nil, errs.New(codes.FailedPrecondition, "%s: %s=true, but this silo signs no tokens on a user's behalf (--delegation-key, --delegation-issuer)", r.h.Address(), RemoteDelegate)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", nil, nil, errs.New(codes.FailedPrecondition, "%s: %s %q: want http(s)://host/...", r.h.Address(), RemoteURL, clientClip(raw))
	}
	headers := http.Header{}
	if k := cfg[RemoteAPIKey]; k != "" {
		headers.Set("X-Api-Key", k)
	}
	if t := cfg[RemoteBearerToken]; t != "" {
		headers.Set("Authorization", "Bearer "+t)
	}
	for k, v := range cfg {
		if name, ok := strings.CutPrefix(k, RemoteHeaderPrefix); ok && name != "" {
			headers.Set(name, v)
		}
	}
	return u.String(), headers, nil, nil
}

// fail gives an error of the server, its transport or ctx its code.
func (r *remoteAgent) fail(ctx context.Context, err error) error {
	code := codes.Unavailable
	wire, answered := isAnswer(err)
	var terr error
	if p := r.last.err.Load(); p != nil {
		terr = *p
	}
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case answered:
		code = remoteWireCode(wire.Code)
	case errors.Is(terr, outbound.ErrBlocked):
		code = codes.PermissionDenied
	default:
		switch s := r.last.status.Load(); {
		case s == http.StatusUnauthorized:
			code = codes.Unauthenticated
		case s == http.StatusForbidden:
			code = codes.PermissionDenied
		case s == http.StatusNotFound || s == http.StatusMethodNotAllowed:
			code = codes.FailedPrecondition // not an MCP endpoint
		case s == http.StatusTooManyRequests:
			code = codes.ResourceExhausted
		}
	}
	return errs.Wrap(code, err, "%s: MCP server %s", r.h.Address(), r.url)
}

// remoteWireCode maps a JSON-RPC error code to a gRPC code.
func remoteWireCode(c int64) codes.Code {
	switch c {
	case jsonrpc.CodeInvalidParams, jsonrpc.CodeInvalidRequest, jsonrpc.CodeParseError:
		return codes.InvalidArgument
	case jsonrpc.CodeMethodNotFound:
		return codes.Unimplemented
	case CodeUnauthenticated:
		return codes.Unauthenticated
	case CodePermissionDenied:
		return codes.PermissionDenied
	case CodeUnavailable:
		return codes.Unavailable
	}
	return codes.Unknown
}

// remoteWithTrace returns ctx, a turn's, in the trace its message carries,
// unless ctx has a span already, so that what the agent sends the server
// continues the caller's trace.
func remoteWithTrace(ctx context.Context) context.Context {
	tp := grain.Traceparent(ctx)
	if trace.SpanContextFromContext(ctx).IsValid() || tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// toolScopes are the scopes a delegated token carries for a call of
// tool (see RemoteScopesPrefix).
func (r *remoteAgent) toolScopes(ctx context.Context, tool string) []string {
	if sc, ok := r.scopes[tool]; ok {
		return sc
	}
	if r.resolved && r.opts.SkillScopes != nil {
		if sc, ok := r.opts.SkillScopes(ctx, r.h.Address().Owner, r.h.Address().Alias, tool); ok {
			return sc
		}
	}
	return nil
}

// scopesKey is the context key of the scopes the delegated token of a
// request carries.
type scopesKey struct{}

// remoteHeaders adds an agent's headers and the request context's W3C
// trace context to every request to its server, and notes the status of
// failed responses. A delegating agent's session for a user adds the
// token for user, with the scopes the request's context names.
type remoteHeaders struct {
	base    http.RoundTripper
	headers http.Header
	last    *remoteLast

	user, audience, actor string
	delegate              func(principal, audience, actor string, scopes []string) (string, error)
}

func (t *remoteHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header[k] = v
	}
	if t.user != "" {
		scopes, _ := req.Context().Value(scopesKey{}).([]string)
		tok, err := t.delegate(t.user, t.audience, t.actor, scopes)
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			t.last.err.Store(&err)
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if trace.SpanContextFromContext(req.Context()).IsValid() {
		propagation.TraceContext{}.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	resp, err := t.base.RoundTrip(req)
	switch {
	case err != nil:
		t.last.err.Store(&err)
	case resp.StatusCode >= 400:
		t.last.status.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// clientClip shortens s for an error message.
func clientClip(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	for i := n; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return s[:n] + "…"
}
