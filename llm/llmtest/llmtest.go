// Package llmtest is a scripted language model for testing model agents
// (package llm) without a provider: a real HTTP server on 127.0.0.1 that
// speaks OpenAI's chat completions API (POST /v1/chat/completions) and
// Anthropic's Messages API (POST /v1/messages), each streamed
// (server-sent events) or not, and answers each request with the next
// Step of its script. The agent under test reaches it through the
// official SDKs, as it reaches a provider: nothing here mocks them. Point
// the definition's model at the server:
//
//	model := llmtest.New(
//		// The first request: a call of the tool Orders_status (the
//		// typed skill status of the agent type Orders).
//		llmtest.Step{ToolCalls: []llmtest.ToolCall{{Name: "Orders_status", Arguments: `{"agent": "shop", "input": {"id": "42"}}`}}},
//		// The second, which carries the tool's result: the answer.
//		llmtest.Step{Text: "Order 42 has shipped."},
//	)
//	defer model.Close()
//	def.Model = llm.Model{Provider: llm.ProviderOpenAI, BaseURL: model.OpenAIURL(), Name: "test-model"}
//
// (model.URL() for llm.ProviderAnthropic; no api_key_env: the server
// takes any key, or none.) Package grain/graintest runs the agent in a
// plain go test, with stubs for the agents its tools ask; the guide's
// "Testing a model agent" (docs/agents.md) shows the two together.
//
// A Step is one response:
//
//   - a reply: Step{Text: "..."};
//   - tool calls, after a text or not: Step{ToolCalls: []ToolCall{{Name:
//     "Orders_status", Arguments: `{...}`}}}; an ID is made up if none is
//     given, and Arguments are sent as written, JSON or not;
//   - an error: Step{Status: 500, ErrorMessage: "overloaded"}, or
//     Step{Status: 429, RetryAfter: "0"}, in the API's error body. The
//     SDKs retry a 408, 409, 429 and 5xx (as many times as the agent's
//     llm.WithMaxRetries says, llm.DefaultMaxRetries by default),
//     honouring Retry-After, and each retry takes the next step: give
//     llm.WithMaxRetries(0) for the error to reach the agent, and
//     RetryAfter "0" for a retry without the SDK's backoff;
//   - a stream cut: Step{Text: "...", CutStream: true} sends the first
//     half of a streamed response and drops the connection (the agent
//     streams with llm.WithStreaming; a request not streamed gets the
//     whole answer);
//   - and, in any of these, the stop reason (StopReason: Stop, the output
//     reached its token limit), the token usage reported, a latency
//     (Delay), or a wait for the test (Wait, Entered: to act while the
//     model call is in flight).
//
// A request beyond the script gets a 400 saying so. NewFunc scripts by
// the conversation instead: each request is answered with the step a
// function makes of it (Loop is one such function, for benchmarks).
//
// The server records every request it receives, parsed into one shape for
// both APIs (Request: the system prompt, the messages with their tool
// calls and results, the tools offered and their schemas), so that a test
// asserts what the model was sent (Requests), which steps were taken
// (Count, Left) and how many requests came (Served).
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// ToolCall is a call of a tool: in a scripted response, or in an
// assistant message of a request (Message.ToolCalls).
type ToolCall struct {
	// ID is the call's id (OpenAI's tool_call id, Anthropic's tool_use
	// id), which the tool's result names (Message.ToolCallID). In a step,
	// "" makes one up: call_<request>_<index>, from 1.
	ID string
	// Name is the tool's name, as the agent offers it (Request.Tools):
	// <Type>_<skill> for a typed skill of an agent type, ask_<Type> for
	// one without typed skills (see llm.ToolRef).
	Name string
	// Arguments are the arguments as the model writes them: usually a
	// JSON object, but a script may send anything, to test what the agent
	// makes of arguments that are not JSON.
	Arguments string
}

// Step is one scripted response. The zero Step is an empty text answer.
type Step struct {
	// Text is the answer's text.
	Text string
	// ToolCalls are the tools the model calls (after Text, if any).
	ToolCalls []ToolCall
	// Status, if not 0, answers with this HTTP error status instead, with
	// ErrorMessage (default: the status's text) in the API's error body
	// and RetryAfter, if set, as the Retry-After header (seconds, or an
	// HTTP date). The SDKs retry 408, 409, 429 and 5xx, each retry taking
	// the next step.
	Status       int
	ErrorMessage string
	RetryAfter   string
	// StopReason overrides the stop reason: "" is "stop" (OpenAI) or
	// "end_turn" (Anthropic), "tool_calls" or "tool_use" with tool calls.
	// Stop is the output's token limit, in either API's words; any other
	// value is sent as it is.
	StopReason string
	// InputTokens and OutputTokens are the usage reported (defaults: 10
	// and 5).
	InputTokens, OutputTokens int
	// CutStream, for a streamed request, sends the first half of the
	// response's events and then drops the connection, without the
	// stream's end: the client reads an unexpected end of the stream. A
	// request not streamed gets the whole response.
	CutStream bool
	// Wait, if not nil, holds the response until it is closed or the
	// client goes away. Entered, if not nil, is closed when the request
	// arrives (before waiting): together, a test acts while the model call
	// is in flight.
	Wait    <-chan struct{}
	Entered chan<- struct{}
	// Delay, if positive, holds the response that long (after Wait), as a
	// model takes its time: the latency a benchmark gives its model.
	Delay time.Duration
}

// Stop is the StopReason of a response cut at the output's token limit:
// sent as "length" to OpenAI's API and "max_tokens" to Anthropic's.
const Stop = "max_tokens"

// Message is one message of a request, in one shape for both APIs.
type Message struct {
	// Role is system, user, assistant or tool (OpenAI's tool messages;
	// Anthropic's tool_result blocks are reported as role tool too).
	Role string
	// Text is the message's text (its text parts joined).
	Text string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers; IsError says whether
	// the result is an error (Anthropic's is_error).
	ToolCallID string
	IsError    bool
	// Data is Text without the data marks a model agent fences content
	// below user-input with (see docs/trust.md): the tool's result, or
	// the agent's message, as it was; Text itself if it has no marks.
	// Label is the content label the marks name ("tool-output",
	// "agent-message", ...; "" without marks), Outside whether they say
	// it came from outside the cluster.
	Data    string
	Label   string
	Outside bool
}

// unfence sets m's Data, Label and Outside from its Text.
func (m *Message) unfence() {
	m.Data = m.Text
	head, rest, ok := strings.Cut(m.Text, ">>\n")
	if !ok || !strings.HasPrefix(head, "<<data ") {
		return
	}
	var id string
	label, outside := "", false
	for _, f := range strings.Fields(strings.TrimPrefix(head, "<<data ")) {
		switch {
		case strings.HasPrefix(f, "label="):
			label = strings.TrimPrefix(f, "label=")
		case strings.HasPrefix(f, "id="):
			id = strings.TrimPrefix(f, "id=")
		case f == "outside":
			outside = true
		}
	}
	end := "\n<<end data id=" + id + ">>"
	if id == "" || !strings.HasSuffix(rest, end) {
		return
	}
	m.Data, m.Label, m.Outside = strings.TrimSuffix(rest, end), label, outside
}

// Request is one request the server received, parsed.
type Request struct {
	// N counts the requests from 1, in the order they arrived.
	N int
	// Step is the index of the script step that answered it, or -1 if the
	// script was exhausted (the request got a 400). With NewFunc, N-1.
	Step int
	// API is "openai" or "anthropic".
	API string
	// Header and Body are the request's HTTP header (its API key among
	// them) and body, as sent.
	Header http.Header
	Body   []byte
	// Stream says whether the client asked for a streamed response.
	Stream bool
	// Model is the model's name, as the client sent it.
	Model string
	// MaxTokens is max_completion_tokens (or max_tokens), 0 if not sent.
	MaxTokens int
	// System is the system prompt (OpenAI's system or developer message,
	// Anthropic's system field); it is not in Messages.
	System string
	// Messages are the conversation, oldest first: the user's messages,
	// the model's earlier responses and the tools' results.
	Messages []Message
	// Tools are the names of the tools offered; Schemas their parameters.
	Tools   []string
	Schemas map[string]json.RawMessage
}

// LastMessage is the request's last message (zero if it has none).
func (r Request) LastMessage() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// Server is a running scripted model. Its methods are safe for concurrent
// use.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	script   []Step
	next     int
	respond  func(Request) Step
	requests []Request
	n        int  // requests received
	forget   bool // keep no requests (SetRecording)
}

// New starts a server that answers with script, one step per request in
// the order the requests arrive (Add appends steps). Close it when done.
func New(script ...Step) *Server {
	s := &Server{script: script}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NewFunc starts a server that answers each request with the step respond
// makes of it: a script by the conversation, say by the request's last
// message. respond is called concurrently for requests that come at once.
// Close the server when done.
func NewFunc(respond func(Request) Step) *Server {
	s := &Server{respond: respond}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close stops the server, dropping requests in flight.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// URL is the server's root URL: the base URL for Anthropic's SDK (an
// llm.Model's BaseURL with llm.ProviderAnthropic).
func (s *Server) URL() string { return s.srv.URL }

// OpenAIURL is the base URL for OpenAI's SDK, the root with /v1 (an
// llm.Model's BaseURL with llm.ProviderOpenAI).
func (s *Server) OpenAIURL() string { return s.srv.URL + "/v1" }

// Add appends steps to the script of a server New made.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	s.script = append(s.script, steps...)
	s.mu.Unlock()
}

// SetRecording says whether the server keeps the requests it receives
// (Requests, Count); it does from the start. A benchmark that sends many
// turns the server need not remember turns it off; Served still counts.
func (s *Server) SetRecording(on bool) {
	s.mu.Lock()
	s.forget = !on
	s.mu.Unlock()
}

// Served returns how many requests the server has received, recorded or
// not.
func (s *Server) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Requests returns the requests received so far, in the order they
// arrived.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many requests step i (from 0) answered: more than one
// when the agent asked again for the same response.
func (s *Server) Count(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Step == i {
			n++
		}
	}
	return n
}

// Left returns how many scripted steps no request has taken yet.
func (s *Server) Left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script) - s.next
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := Request{Header: r.Header.Clone(), Body: body}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions"):
		req.API = "openai"
		err = parseOpenAI(body, &req)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages"):
		req.API = "anthropic"
		err = parseAnthropic(body, &req)
	default:
		http.Error(w, "llmtest: no such endpoint: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	for i := range req.Messages {
		req.Messages[i].unfence()
	}
	if err != nil {
		http.Error(w, "llmtest: "+err.Error(), http.StatusBadRequest)
		return
	}

	s.mu.Lock()
	s.n++
	req.N = s.n
	var step Step
	ok := true
	switch {
	case s.respond != nil:
		req.Step = req.N - 1
	case s.next < len(s.script):
		req.Step = s.next
		step = s.script[s.next]
		s.next++
	default:
		req.Step, ok = -1, false
	}
	respond := s.respond
	s.mu.Unlock()
	if respond != nil {
		step = respond(req)
	}
	s.mu.Lock()
	if !s.forget {
		s.requests = append(s.requests, req)
	}
	s.mu.Unlock()

	if !ok {
		writeError(w, req.API, http.StatusBadRequest, "", fmt.Sprintf("llmtest: the script has no step left for request %d", req.N))
		return
	}
	if step.Entered != nil {
		close(step.Entered)
	}
	if step.Wait != nil {
		select {
		case <-step.Wait:
		case <-r.Context().Done():
			return
		}
	}
	if step.Delay > 0 {
		t := time.NewTimer(step.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if step.Status != 0 {
		writeError(w, req.API, step.Status, step.RetryAfter, step.ErrorMessage)
		return
	}
	if step.InputTokens == 0 {
		step.InputTokens = 10
	}
	if step.OutputTokens == 0 {
		step.OutputTokens = 5
	}
	for i := range step.ToolCalls {
		if step.ToolCalls[i].ID == "" {
			step.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", req.N, i+1)
		}
	}
	switch req.API {
	case "openai":
		if req.Stream {
			streamOpenAI(w, req, step)
		} else {
			writeJSON(w, openAICompletion(req, step))
		}
	case "anthropic":
		if req.Stream {
			streamAnthropic(w, req, step)
		} else {
			writeJSON(w, anthropicMessage(req, step))
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// writeError answers with status and the API's error body.
func writeError(w http.ResponseWriter, api string, status int, retryAfter, msg string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var body any
	if api == "anthropic" {
		typ := "api_error"
		switch {
		case status == http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case status == 529:
			typ = "overloaded_error"
		case status < 500:
			typ = "invalid_request_error"
		}
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	} else {
		body = map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "code": nil, "param": nil}}
	}
	json.NewEncoder(w).Encode(body)
}

// sse writes server-sent events, flushing each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, v any) {
	var b bytes.Buffer
	if name != "" {
		fmt.Fprintf(&b, "event: %s\n", name)
	}
	data, _ := json.Marshal(v)
	fmt.Fprintf(&b, "data: %s\n\n", data)
	s.w.Write(b.Bytes())
	if s.f != nil {
		s.f.Flush()
	}
}

func (s *sse) raw(line string) {
	io.WriteString(s.w, line)
	if s.f != nil {
		s.f.Flush()
	}
}

// cut drops the connection under a response that has begun: the client
// reads an unexpected end of the stream.
func (s *sse) cut() {
	hj, ok := s.w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		conn.Close()
	}
}

// halves splits s in two (at a rune boundary), for deltas.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	i := len(s) / 2
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return []string{s[:i], s[i:]}
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
