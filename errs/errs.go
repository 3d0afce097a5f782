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
// still answers errors.Is and errors.As for the cause, and so does every %w
// operand of New's and Wrap's format (as with fmt.Errorf, several may be).
//
//	err := errs.Wrap(codes.Unavailable, ctxErr, "etcd unavailable: list reminders")
//	errors.Is(err, errs.ErrUnavailable)    // true: the code's sentinel
//	errors.Is(err, context.DeadlineExceeded) // true: the cause
//	err = errs.New(codes.InvalidArgument, "--data-file: %w", readErr)
//	errors.Is(err, fs.ErrNotExist)         // true: a %w operand
//
// errs is agentsilo's one vocabulary of errors: other packages give some of
// its sentinels names of their own (client.ErrNotFound, grain.ErrConflict),
// each the same value as the sentinel here; docs/errors.md lists them.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is an error with a gRPC status code, and possibly a cause (see
// Wrap). It satisfies status.FromError (through GRPCStatus) and errors.Is
// against the sentinels below.
type Error struct {
	code     codes.Code
	msg      string
	cause    error   // Wrap's cause, whose message follows msg; nil if none
	operands []error // the %w operands of the format, in msg already
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
	// etag (grain.ErrConflict is the same sentinel, and client.ErrAborted).
	ErrAborted = &Error{code: codes.Aborted}
	// ErrFailedPrecondition: the silo is not set up for the call, such as
	// agent state on a silo without a state store.
	ErrFailedPrecondition = &Error{code: codes.FailedPrecondition}
	// ErrAlreadyExists: what the call would do is done already, such as a
	// state save under an idempotency key an earlier attempt saved with
	// (grain.ErrApplied is the same sentinel, and client.ErrAlreadyExists).
	ErrAlreadyExists = &Error{code: codes.AlreadyExists}
)

// New returns an error with code and a message formatted as fmt.Errorf
// formats it: each %w operand is kept, and errors.Is and errors.As see it
// (Code, status.Code and errors.Is against the sentinels see code, as for
// Wrap's cause).
func New(code codes.Code, format string, args ...any) error {
	return newError(code, format, args)
}

func newError(code codes.Code, format string, args []any) *Error {
	switch {
	case len(args) == 0:
		return &Error{code: code, msg: format}
	case !strings.Contains(format, "%w"):
		return &Error{code: code, msg: fmt.Sprintf(format, args...)}
	}
	f := fmt.Errorf(format, args...)
	e := &Error{code: code, msg: f.Error()}
	switch f := f.(type) {
	case interface{ Unwrap() error }:
		if c := f.Unwrap(); c != nil {
			e.operands = []error{keep(code, c)}
		}
	case interface{ Unwrap() []error }:
		for _, c := range f.Unwrap() {
			if c != nil {
				e.operands = append(e.operands, keep(code, c))
			}
		}
	}
	return e
}

// keep returns cause as an *Error of code holds it: wrapped in otherCode
// if it carries another agentsilo code, so that code is the only one
// errors.Is reports.
func keep(code codes.Code, cause error) error {
	var inner *Error
	if errors.As(cause, &inner) && inner.code != code {
		return otherCode{cause}
	}
	return cause
}

// Wrap returns an error with code whose message is the formatted message,
// then ": " and cause's. The result keeps cause: errors.Is and errors.As see
// it (and Unwrap returns it), while Code, status.Code and errors.Is against
// the sentinels see code. If cause carries another agentsilo code (an *Error
// in its chain), code wins everywhere: errors.Is(err, ErrX) is true only for
// code's sentinel, and cause stays reachable through errors.Is and errors.As
// but not through the sentinels. A nil cause gives what New gives.
//
// The format's %w operands are kept as well, as New keeps them.
func Wrap(code codes.Code, cause error, format string, args ...any) error {
	e := newError(code, format, args)
	if cause == nil {
		return e
	}
	e.cause = keep(code, cause)
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

// Unwrap returns the cause given to Wrap, or the %w operand of the format;
// if there are several of them, an error whose Unwrap() []error returns
// them all (the cause first), as errors.Is and errors.As follow. Nil if
// there is none.
func (e *Error) Unwrap() error {
	switch {
	case len(e.operands) == 0:
		return e.cause
	case e.cause == nil && len(e.operands) == 1:
		return e.operands[0]
	case e.cause == nil:
		return causes(e.operands)
	}
	return causes(append([]error{e.cause}, e.operands...))
}

// causes are the several causes of an *Error.
type causes []error

func (c causes) Error() string {
	var b strings.Builder
	for i, err := range c {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (c causes) Unwrap() []error { return c }

// GRPCStatus makes status.FromError and status.Code understand Error.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel() && t.code == e.code
}

func (e *Error) sentinel() bool { return e.msg == "" && e.cause == nil && e.operands == nil }

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
