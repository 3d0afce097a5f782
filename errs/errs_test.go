package errs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestIsAndCode(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", New(codes.NotFound, "agent type %q is not registered", "Nope"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is(%v, ErrNotFound) = false", err)
	}
	if errors.Is(err, ErrInternal) {
		t.Fatalf("errors.Is(%v, ErrInternal) = true", err)
	}
	if got := status.Code(New(codes.InvalidArgument, "x")); got != codes.InvalidArgument {
		t.Fatalf("status.Code = %v", got)
	}
	if got := Code(err); got != codes.NotFound {
		t.Fatalf("Code = %v", got)
	}
	if got := Code(context.DeadlineExceeded); got != codes.DeadlineExceeded {
		t.Fatalf("Code(ctx deadline) = %v", got)
	}
	if got := Code(errors.New("plain")); got != codes.Unknown {
		t.Fatalf("Code(plain) = %v", got)
	}
}

func TestFromStatus(t *testing.T) {
	err := FromStatus(status.Error(codes.PermissionDenied, "missing Message"))
	if !errors.Is(err, ErrPermissionDenied) || err.Error() != "missing Message" {
		t.Fatalf("FromStatus = %v", err)
	}
	if FromStatus(nil) != nil {
		t.Fatal("FromStatus(nil) != nil")
	}
}

func TestWrapKeepsTheCause(t *testing.T) {
	cause := fmt.Errorf("dial: %w", context.DeadlineExceeded)
	err := Wrap(codes.Unavailable, cause, "etcd unavailable: list %s", "reminders")
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("errors.Is(%v, ErrUnavailable) = false", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cause) {
		t.Errorf("the cause is lost: %v", err)
	}
	if errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("errors.Is(%v, ErrDeadlineExceeded) = true; the code is Unavailable", err)
	}
	if errors.Unwrap(err) != cause {
		t.Errorf("Unwrap = %v, want the cause", errors.Unwrap(err))
	}
	if got := status.Code(err); got != codes.Unavailable {
		t.Errorf("status.Code = %v", got)
	}
	if got := Code(fmt.Errorf("outer: %w", err)); got != codes.Unavailable {
		t.Errorf("Code = %v", got)
	}
	const want = "etcd unavailable: list reminders: dial: context deadline exceeded"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if st, _ := status.FromError(err); st.Message() != want {
		t.Errorf("status message = %q", st.Message())
	}
	var e *Error
	if !errors.As(err, &e) || e.Message() != want || e.Code() != codes.Unavailable {
		t.Errorf("errors.As = %v %q", e, e.Message())
	}
	if err := Wrap(codes.Internal, nil, "no cause"); err == nil || err.Error() != "no cause" || Code(err) != codes.Internal {
		t.Errorf("Wrap with a nil cause = %v", err)
	}
}

// A cause with another code: the outer code is the only one the sentinels
// report, and the cause is still reachable.
func TestWrapOtherCode(t *testing.T) {
	inner := New(codes.InvalidArgument, "rule 1: bad pattern")
	err := Wrap(codes.Internal, inner, "the stored ACL is invalid")
	if !errors.Is(err, ErrInternal) || errors.Is(err, ErrInvalidArgument) {
		t.Errorf("errors.Is: Internal %v, InvalidArgument %v; want true, false", errors.Is(err, ErrInternal), errors.Is(err, ErrInvalidArgument))
	}
	if !errors.Is(err, inner) {
		t.Error("errors.Is(err, inner) = false")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code() != codes.Internal {
		t.Errorf("errors.As = %v", e)
	}
	if Code(err) != codes.Internal || status.Code(err) != codes.Internal {
		t.Errorf("Code %v, status.Code %v", Code(err), status.Code(err))
	}
	// The same code: nothing to hide.
	same := Wrap(codes.InvalidArgument, inner, "config")
	if !errors.Is(same, ErrInvalidArgument) || errors.Unwrap(same) != inner {
		t.Errorf("Wrap of the same code = %v", same)
	}
	if err.Error() != "the stored ACL is invalid: rule 1: bad pattern" {
		t.Errorf("Error() = %q", err)
	}
}

func TestFromStatusKeepsAPlainCause(t *testing.T) {
	err := FromStatus(context.Canceled)
	if Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) || err.Error() != context.Canceled.Error() {
		t.Fatalf("FromStatus(context.Canceled) = %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Message() != context.Canceled.Error() {
		t.Fatalf("Message = %q", e.Message())
	}
}

// New and Wrap keep their format's %w operands as fmt.Errorf does: errors.Is
// and errors.As see each, the message reads as fmt.Errorf's, and the code
// stays the error's own (an operand with another code is not reported by
// the sentinels).
func TestNewKeepsWOperands(t *testing.T) {
	err := New(codes.Unavailable, "save %q: %w", "Echo:a:b", context.DeadlineExceeded)
	if err.Error() != `save "Echo:a:b": context deadline exceeded` {
		t.Errorf("message %q", err.Error())
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("errors.Is: the operand %t, Unavailable %t, DeadlineExceeded %t; want true, true, false",
			errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrUnavailable), errors.Is(err, ErrDeadlineExceeded))
	}
	if Code(err) != codes.Unavailable || status.Code(err) != codes.Unavailable {
		t.Errorf("Code %v, status.Code %v; want Unavailable", Code(err), status.Code(err))
	}
	if errors.Unwrap(err) != context.DeadlineExceeded {
		t.Errorf("Unwrap = %v, want the operand", errors.Unwrap(err))
	}

	// Several operands, one of another code.
	notFound := New(codes.NotFound, "agent type %q is not registered", "Nope")
	pathErr := &os.PathError{Op: "open", Path: "x", Err: os.ErrNotExist}
	err = New(codes.InvalidArgument, "%w; and %w", notFound, pathErr)
	if !errors.Is(err, notFound) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v: an operand is lost", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe != pathErr {
		t.Errorf("errors.As(%v, *os.PathError) = %v", err, pe)
	}
	if errors.Is(err, ErrNotFound) || !errors.Is(err, ErrInvalidArgument) || Code(err) != codes.InvalidArgument {
		t.Errorf("%v: the code is %v (NotFound %t), want InvalidArgument alone", err, Code(err), errors.Is(err, ErrNotFound))
	}

	// Wrap: its cause and the format's operands alike, the cause's message
	// after the format's.
	err = Wrap(codes.Internal, io.ErrUnexpectedEOF, "read %s: %w", "frame", os.ErrDeadlineExceeded)
	if err.Error() != "read frame: i/o timeout: unexpected EOF" {
		t.Errorf("message %q", err.Error())
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, os.ErrDeadlineExceeded) || Code(err) != codes.Internal {
		t.Errorf("%v: a cause is lost, or the code (%v) is not Internal", err, Code(err))
	}

	// No %w: nothing is kept, and the sentinels stay sentinels. (The
	// format is a variable, for TestWrapsKeepCauses, which would refuse
	// this %v.)
	plain := "plain %v"
	err = New(codes.Internal, plain, io.EOF)
	if errors.Is(err, io.EOF) || errors.Unwrap(err) != nil {
		t.Errorf("%v: %%v kept its operand", err)
	}
	if !errors.Is(ErrNotFound, ErrNotFound) || errors.Is(New(codes.NotFound, "x: %w", io.EOF), New(codes.NotFound, "y")) {
		t.Error("an error with an operand is taken for a sentinel")
	}
}
