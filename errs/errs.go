// Package errs is agentsilo's one table between errors and gRPC status codes.
// It is small on purpose: the grain runtime, the gateway and the client SDK all
// import it, and an SDK user links nothing else of the runtime through it.
//
// Every error agentsilo returns carries a gRPC code. Test for a kind with
// errors.Is against the sentinels, or read the code with status.Code / Code:
//
//	if errors.Is(err, errs.ErrNotFound) { ... }
//	if status.Code(err) == codes.NotFound { ... }
//
// An error that has a cause keeps it: Wrap gives it a code and a message and
// still answers errors.Is and errors.As for the cause.
//
//	err := errs.Wrap(codes.Unavailable, ctxErr, "etcd unavailable: list reminders")
//	errors.Is(err, errs.ErrUnavailable)    // true: the code's sentinel
//	errors.Is(err, context.DeadlineExceeded) // true: the cause
package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is an error with a gRPC status code, and possibly a cause (see
// Wrap). It satisfies status.FromError (through GRPCStatus) and errors.Is
// against the sentinels below.
type Error struct {
	code  codes.Code
	msg   string
	cause error // nil, or what Unwrap returns
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
	// ErrAlreadyExists: what the call would do is done already, such as a
	// state save under an idempotency key an earlier attempt saved with.
	ErrAlreadyExists = &Error{code: codes.AlreadyExists}
)

// New returns an error with code and a formatted message.
func New(code codes.Code, format string, args ...any) error {
	if len(args) == 0 {
		return &Error{code: code, msg: format}
	}
	return &Error{code: code, msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with code whose message is the formatted message,
// then ": " and cause's. The result keeps cause: errors.Is and errors.As see
// it (and Unwrap returns it), while Code, status.Code and errors.Is against
// the sentinels see code. If cause carries another agentsilo code (an *Error
// in its chain), code wins everywhere: errors.Is(err, ErrX) is true only for
// code's sentinel, and cause stays reachable through errors.Is and errors.As
// but not through the sentinels. A nil cause gives what New gives.
func Wrap(code codes.Code, cause error, format string, args ...any) error {
	e := New(code, format, args...).(*Error)
	if cause == nil {
		return e
	}
	var inner *Error
	if errors.As(cause, &inner) && inner.code != code {
		cause = otherCode{cause}
	}
	e.cause = cause
	return e
}

// Error returns the message, followed by the cause's.
func (e *Error) Error() string {
	if m := e.Message(); m != "" {
		return m
	}
	return e.code.String()
}

// Code returns the gRPC code.
func (e *Error) Code() codes.Code { return e.code }

// Message returns the message without the code: Wrap's message and the
// cause's.
func (e *Error) Message() string {
	switch {
	case e.cause == nil:
		return e.msg
	case e.msg == "":
		return e.cause.Error()
	}
	return e.msg + ": " + e.cause.Error()
}

// Unwrap returns the cause given to Wrap, or nil.
func (e *Error) Unwrap() error { return e.cause }

// GRPCStatus makes status.FromError and status.Code understand Error.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel() && t.code == e.code
}

func (e *Error) sentinel() bool { return e.msg == "" && e.cause == nil }

// otherCode holds a cause that carries another code than the *Error wrapping
// it: errors.Is and errors.As reach into it, except for the sentinels, so
// that the outer code is the only one errors.Is reports.
type otherCode struct{ err error }

func (o otherCode) Error() string { return o.err.Error() }

func (o otherCode) Is(target error) bool {
	if t, ok := target.(*Error); ok && t.sentinel() {
		return false
	}
	return errors.Is(o.err, target)
}

func (o otherCode) As(target any) bool { return errors.As(o.err, target) }

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
// their Code, and are kept as the cause. The message is kept as is.
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
	return &Error{code: Code(err), cause: err}
}
