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
