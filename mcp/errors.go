package mcp

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The JSON-RPC error codes of refused calls, beside JSON-RPC's own
// (jsonrpc.CodeInvalidParams for bad arguments and unknown tools or
// agents, jsonrpc.CodeInternalError otherwise). Every such error's data is
// {"code": "<gRPC code name>"}, e.g. {"code": "PermissionDenied"}. They
// stay clear of the codes JSON-RPC, MCP and the SDKs give a meaning.
const (
	// CodeUnauthenticated: the caller could not be authenticated.
	CodeUnauthenticated = -32030
	// CodePermissionDenied: the ACL refuses the caller the call or listing.
	CodePermissionDenied = -32031
	// CodeUnavailable: the silo cannot take the call now (shutting down,
	// the ACL not loaded yet); retry.
	CodeUnavailable = -32032
)

// protocolError is err, an agentsilo error refusing a request, as a
// JSON-RPC error.
func protocolError(err error) *jsonrpc.Error {
	code := errs.Code(err)
	var c int64
	switch code {
	case codes.InvalidArgument, codes.NotFound:
		c = jsonrpc.CodeInvalidParams
	case codes.Unauthenticated:
		c = CodeUnauthenticated
	case codes.PermissionDenied:
		c = CodePermissionDenied
	case codes.Unavailable, codes.ResourceExhausted:
		c = CodeUnavailable
	default:
		c = jsonrpc.CodeInternalError
	}
	data, _ := json.Marshal(map[string]string{"code": code.String()})
	return &jsonrpc.Error{Code: c, Message: messageOf(err), Data: data}
}

// messageOf is err's message without its code.
func messageOf(err error) string {
	var e *errs.Error
	if errors.As(err, &e) {
		return e.Message()
	}
	return err.Error()
}

// clip shortens s to at most n bytes for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
