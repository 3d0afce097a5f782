package errs

import (
	"context"
	"errors"
	"fmt"
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
