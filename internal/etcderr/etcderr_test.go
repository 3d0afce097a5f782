package etcderr

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
)

func TestWrapKeepsTheFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"request timeout", context.DeadlineExceeded, codes.Unavailable, "etcd unavailable: context deadline exceeded"},
		{"no endpoints", clientv3.ErrNoAvailableEndpoints, codes.Unavailable, "etcd unavailable: etcdclient: no available endpoints"},
		{"canceled", context.Canceled, codes.Canceled, "context canceled"},
		{"too large", rpctypes.ErrGRPCRequestTooLarge, codes.ResourceExhausted, "etcd: etcdserver: request is too large"},
		{"no leader", rpctypes.ErrGRPCNoLeader, codes.Unavailable, "etcd unavailable: etcdserver: no leader"},
		{"client closed", status.Error(codes.Canceled, "grpc: the client connection is closing"), codes.Unavailable, "etcd unavailable"},
		{"permission", rpctypes.ErrGRPCPermissionDenied, codes.PermissionDenied, "etcd: etcdserver: permission denied"},
		{"plain", errors.New("boom"), codes.Internal, "etcd: boom"},
		{"raft stopped", errors.New("raft: stopped"), codes.Unavailable, "etcd unavailable: raft: stopped"},
		{"server stopped", rpctypes.ErrGRPCStopped, codes.Unavailable, "etcd unavailable: etcdserver: server stopped"},
	} {
		err := Wrap(tc.err)
		if errs.Code(err) != tc.code || status.Code(err) != tc.code {
			t.Errorf("%s: Wrap(%v) = %v (%v), want %v", tc.name, tc.err, err, errs.Code(err), tc.code)
		}
		if got := err.Error(); len(got) < len(tc.msg) || got[:len(tc.msg)] != tc.msg {
			t.Errorf("%s: message %q, want it to start with %q", tc.name, got, tc.msg)
		}
		if !errors.Is(err, tc.err) && !errors.Is(err, rpctypes.Error(tc.err)) {
			t.Errorf("%s: the cause %v is lost in %v", tc.name, tc.err, err)
		}
	}
	if err := Wrap(rpctypes.ErrGRPCRequestTooLarge); !errors.Is(err, rpctypes.ErrRequestTooLarge) || !errors.Is(err, errs.ErrResourceExhausted) {
		t.Errorf("Wrap(too large) = %v: want errors.Is for rpctypes.ErrRequestTooLarge and ErrResourceExhausted", err)
	}
	if Wrap(nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
	coded := errs.New(codes.NotFound, "no such key")
	if Wrap(coded) != coded {
		t.Error("Wrap changed an error that has a code")
	}
}

func TestFromCall(t *testing.T) {
	// The caller's context ended: its own code, whatever etcd said.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := FromCall(ctx, context.Canceled, "register reminder %q", "tick")
	if errs.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) || err.Error() != `register reminder "tick": context canceled` {
		t.Errorf("cancelled caller: %v (%v)", err, errs.Code(err))
	}
	dctx, dcancel := context.WithDeadline(t.Context(), time.Time{})
	defer dcancel()
	if err := FromCall(dctx, rpctypes.ErrGRPCNoLeader, "list"); errs.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller past its deadline: %v (%v)", err, errs.Code(err))
	}

	// The caller still waits: etcd's failure, mapped and kept.
	op := fmt.Errorf("op timeout: %w", context.DeadlineExceeded)
	err = FromCall(t.Context(), op, "list reminders of %s", "Ticker:a:b")
	if errs.Code(err) != codes.Unavailable || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("etcd timeout: %v (%v)", err, errs.Code(err))
	}
	if want := "etcd unavailable: list reminders of Ticker:a:b: op timeout: context deadline exceeded"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	err = FromCall(t.Context(), rpctypes.ErrGRPCRequestTooLarge, "put")
	if errs.Code(err) != codes.ResourceExhausted || !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Errorf("too large: %v (%v)", err, errs.Code(err))
	}
	coded := errs.New(codes.NotFound, "gone")
	if err := FromCall(t.Context(), coded, "get"); errs.Code(err) != codes.NotFound || !errors.Is(err, coded) || err.Error() != "get: gone" {
		t.Errorf("coded: %v", err)
	}
	if FromCall(t.Context(), nil, "x") != nil {
		t.Error("FromCall(nil) != nil")
	}
}
