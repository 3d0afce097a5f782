// Package etcderr is agentsilo's one table from etcd client failures to gRPC
// codes, shared by everything that keeps state in etcd: membership, agent
// configurations, reminders and ACL rules.
//
// The failure is kept, not turned into a string: the error returned has the
// code (errs.Code, status.Code, errors.Is against the errs sentinels) and
// still answers errors.Is and errors.As for etcd's own error (for example
// rpctypes.ErrRequestTooLarge) and for context errors.
//
// A call made on behalf of a caller reports through FromCall, which tells the
// caller's own cancellation or deadline apart from an etcd failure:
//
//	resp, err := cli.Put(octx, key, val) // octx: ctx bounded by a per-request timeout
//	if err != nil {
//		return etcderr.FromCall(ctx, err, "register reminder %q", name)
//	}
package etcderr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/errs"
)

// Wrap gives err, an etcd client failure, its agentsilo code, keeping err
// (or etcd's typed form of it) as the cause. Losing etcd is Unavailable: a
// dead or unreachable server, no leader, a closed client, and a request that
// ran out of time waiting for etcd (use FromCall if the caller's own deadline
// should read as DeadlineExceeded). Requests etcd refuses as too large are
// ResourceExhausted. Errors that already carry an agentsilo code keep it; nil
// stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	code, failure, cause := classify(err)
	return errs.Wrap(code, cause, "%s", failure)
}

// FromCall returns the error of an etcd call made with ctx, or with a
// context derived from it (one bounded by a per-request timeout): if ctx
// itself has ended, the caller gave up and etcd did not fail, so the error is
// Canceled or DeadlineExceeded with ctx.Err() as its cause; otherwise it is
// Wrap's code for err. The message is the formatted description of the call,
// then the cause's. It is the one helper for "the caller's context error,
// else the etcd error"; nil err gives nil.
func FromCall(ctx context.Context, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := format
	if len(args) > 0 {
		what = fmt.Sprintf(format, args...)
	}
	if cerr := ctx.Err(); cerr != nil {
		code := codes.Canceled
		if errors.Is(cerr, context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		}
		return errs.Wrap(code, cerr, "%s", what)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return errs.Wrap(e.Code(), err, "%s", what)
	}
	code, failure, cause := classify(err)
	if failure != "" {
		what = failure + ": " + what
	}
	return errs.Wrap(code, cause, "%s", what)
}

// classify maps an etcd client failure to a code, a word on the failure for
// the message ("etcd unavailable", "etcd", or none) and the cause to keep.
func classify(err error) (code codes.Code, failure string, cause error) {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled, "", err
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, clientv3.ErrNoAvailableEndpoints):
		return codes.Unavailable, "etcd unavailable", err
	}
	cause = err
	var etcdErr rpctypes.EtcdError
	if ee := rpctypes.Error(err); errors.As(ee, &etcdErr) {
		// etcd's typed error: errors.Is(err, rpctypes.ErrRequestTooLarge).
		cause = ee
		if etcdErr.Code() == codes.InvalidArgument && errors.Is(ee, rpctypes.ErrRequestTooLarge) {
			return codes.ResourceExhausted, "etcd", cause
		}
	}
	code = codes.Unknown
	if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else if errors.As(cause, &etcdErr) {
		code = etcdErr.Code()
	}
	if stopping(err) {
		return codes.Unavailable, "etcd unavailable", cause
	}
	switch code {
	case codes.ResourceExhausted, codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated:
		return code, "etcd", cause
	case codes.Canceled:
		// The client was closed under the call.
		return codes.Unavailable, "etcd unavailable", cause
	case codes.Unknown, codes.Internal, codes.DataLoss:
		return codes.Internal, "etcd", cause
	}
	return codes.Unavailable, "etcd unavailable", cause
}

// stopping reports whether err says that the etcd server is stopping or
// has stopped (an embedded etcd closing, a member shutting down): its
// raft node and server answer with plain errors that carry no gRPC code,
// but the failure is etcd being away, not an internal one.
func stopping(err error) bool {
	msg := err.Error()
	for _, s := range []string{"raft: stopped", "etcdserver: server stopped", "etcdserver: server stopping"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
