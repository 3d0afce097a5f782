package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Provider is one model API, reached through its official SDK. The loop
// calls Complete once per model call, from the agent's turn; a Provider is
// shared by every activation of its type, so Complete is called
// concurrently.
type Provider interface {
	// Complete sends the conversation and the tools to the model and
	// returns its response. onDelta, if not nil, gets the answer's text as
	// it streams (the provider then uses the API's streaming form); the
	// returned Response is whole either way. Errors carry gRPC codes
	// (see ModelError).
	Complete(ctx context.Context, req *Request, onDelta func(text string)) (*Response, error)
}

// Request is what a model call sends.
type Request struct {
	Model  string
	System string
	// Messages are the conversation: user and assistant messages, and the
	// results of the assistant's tool calls (role tool).
	Messages []Message
	Tools    []ToolSpec
	// MaxOutputTokens bounds the response (0: the provider's default).
	MaxOutputTokens int
}

// Roles of messages.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one message of a conversation, as the agent records it.
type Message struct {
	Role string `json:"role"`
	Text string `json:"text,omitempty"`
	// ToolCalls are the tools an assistant message calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID, Name and IsError describe a tool result (role tool):
	// the call it answers, the tool's name, and whether it is an error.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
	// Turn is the id of the turn the message belongs to (in the agent's
	// record; providers ignore it).
	Turn string `json:"turn,omitempty"`
	// Label is the content label of a user or tool message, by its name
	// (grain.Label.Name: "user-input", "agent-message", "tool-output",
	// ...), and Outside says it came from outside the cluster. The loop
	// fences the text of one below user-input in what the model receives
	// (see docs/trust.md); providers ignore both.
	Label   string `json:"label,omitempty"`
	Outside bool   `json:"outside,omitempty"`
}

// ToolCall is a call of a tool by the model.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments are the arguments as the model wrote them (JSON, if the
	// model kept to the schema).
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// Schema is the JSON Schema (an object) of the tool's arguments.
	Schema json.RawMessage
}

// Usage counts a model call's tokens.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

func (u *Usage) add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
}

// Stop reasons of a Response.
const (
	StopEnd       = "end"        // the model answered
	StopToolCalls = "tool_calls" // the model calls tools
	StopMaxTokens = "max_tokens" // the output reached its token limit
	StopRefusal   = "refusal"    // the model refused
	StopOther     = "other"      // anything else the API said
)

// Response is a model call's result.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	// StopReason is one of the Stop constants; APIStopReason is the API's
	// own word.
	StopReason    string
	APIStopReason string
	// Model is the model that answered, as the API names it.
	Model string
}

// ModelError is the error of a model call that failed, with the gRPC code
// its HTTP status (or network failure) maps to:
//
//	400, 404, 413, 422   InvalidArgument (404: NotFound, such as an unknown model)
//	401                  Unauthenticated
//	403                  PermissionDenied
//	429                  ResourceExhausted (after the SDK's retries)
//	408, 5xx, 529        Unavailable (after the SDK's retries)
//	network, cut stream  Unavailable
//
// and the context's own end as Canceled or DeadlineExceeded.
func ModelError(provider string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return errs.Wrap(codes.Canceled, err, "%s model call cancelled", provider)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errs.Wrap(codes.DeadlineExceeded, err, "%s model call: deadline exceeded", provider)
	}
	if c := errs.Code(err); c != codes.Unknown {
		return err // ours already
	}
	var status interface{ httpStatus() int }
	if errors.As(err, &status) {
		return errs.Wrap(statusCode(status.httpStatus()), err, "%s model call", provider)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return errs.Wrap(codes.Unavailable, err, "%s model call: the connection failed", provider)
	}
	return errs.Wrap(codes.Unavailable, err, "%s model call", provider)
}

// statusCode maps an HTTP status of a model API to a gRPC code.
func statusCode(status int) codes.Code {
	switch {
	case status == http.StatusUnauthorized:
		return codes.Unauthenticated
	case status == http.StatusForbidden:
		return codes.PermissionDenied
	case status == http.StatusNotFound:
		return codes.NotFound
	case status == http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case status == http.StatusRequestTimeout || status >= 500:
		return codes.Unavailable
	case status == http.StatusConflict:
		return codes.Aborted
	case status >= 400:
		return codes.InvalidArgument
	}
	return codes.Unknown
}

// httpError wraps an SDK's API error so that ModelError reads its status.
type httpError struct {
	status int
	msg    string // the API's message, if the SDK's error does not show it
	err    error
}

func (e *httpError) Error() string {
	if e.msg != "" && !strings.Contains(e.err.Error(), e.msg) {
		return e.err.Error() + ": " + e.msg
	}
	return e.err.Error()
}

func (e *httpError) Unwrap() error   { return e.err }
func (e *httpError) httpStatus() int { return e.status }
