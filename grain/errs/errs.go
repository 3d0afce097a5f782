// Package errs is agentsilo's one table between errors and gRPC status codes.
// It is small on purpose: the grain runtime, the gateway and the client SDK all
// import it, and an SDK user links nothing else of the runtime through it.
//
// Every error agentsilo returns carries a gRPC code. Test for a kind with
// errors.Is against the sentinels, or read the code with status.Code / Code:
//
//	if errors.Is(err, errs.ErrNotFound) { ... }
//	if status.Code(err) == codes.NotFound { ... }
package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is an error with a gRPC status code. It satisfies status.FromError
// (through GRPCStatus) and errors.Is against the sentinels below.
type Error struct {
	code codes.Code
	msg  string
}

// Sentinels, one per code agentsilo uses. errors.Is(err, ErrNotFound) is true
// for every *Error (and every gRPC status error seen through Code) with that code.
var (
	ErrInvalidArgument   = &Error{code: codes.InvalidArgument}
	ErrNotFound          = &Error{code: codes.NotFound}
	ErrPermissionDenied  = &Error{code: codes.PermissionDenied}
	ErrUnauthenticated   = &Error{code: codes.Unauthenticated}
	ErrDeadlineExceeded  = &Error{code: codes.DeadlineExceeded}
	ErrResourceExhausted = &Error{code: codes.ResourceExhausted}
	ErrUnavailable       = &Error{code: codes.Unavailable}
	ErrInternal          = &Error{code: codes.Internal}
	// ErrAborted: a write lost a race, such as a state save with a stale
	// etag (grain.ErrConflict is the same sentinel).
	ErrAborted = &Error{code: codes.Aborted}
	// ErrFailedPrecondition: the silo is not set up for the call, such as
	// agent state on a silo without a state store.
	ErrFailedPrecondition = &Error{code: codes.FailedPrecondition}
)

// New returns an error with code and a formatted message.
func New(code codes.Code, format string, args ...any) error {
	if len(args) == 0 {
		return &Error{code: code, msg: format}
	}
	return &Error{code: code, msg: fmt.Sprintf(format, args...)}
}

// Error returns the message.
func (e *Error) Error() string {
	if e.msg == "" {
		return e.code.String()
	}
	return e.msg
}

// Code returns the gRPC code.
func (e *Error) Code() codes.Code { return e.code }

// Message returns the message without the code.
func (e *Error) Message() string { return e.msg }

// GRPCStatus makes status.FromError and status.Code understand Error.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.msg == "" && t.code == e.code
}

// Code returns the gRPC code of err: OK for nil, the code of an *Error or a
// gRPC status error, DeadlineExceeded and Canceled for the context errors, and
// Unknown for anything else.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// FromStatus turns a gRPC status error (as a gRPC call returns it) into an
// *Error, so that errors.Is works on it; nil stays nil and other errors get
// their Code. The message is kept as is.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if st, ok := status.FromError(err); ok {
		return &Error{code: st.Code(), msg: st.Message()}
	}
	return &Error{code: Code(err), msg: err.Error()}
}
