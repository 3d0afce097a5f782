// Package etcderr is agentsilo's one table from etcd client failures to gRPC
// codes, shared by everything that keeps state in etcd: membership, agent
// configurations, reminders and ACL rules.
package etcderr

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/grain/errs"
)

// Wrap gives err, an etcd client failure, its agentsilo code. Losing etcd is Unavailable: a dead or unreachable server, no leader, a
// closed client, and a request that ran out of time waiting for etcd (check
// the caller's own context first if its deadline should read as
// DeadlineExceeded). Requests etcd refuses as too large are
// ResourceExhausted. Errors that already carry an agentsilo code keep it.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled):
		return errs.New(codes.Canceled, "%s", msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, clientv3.ErrNoAvailableEndpoints):
		return errs.New(codes.Unavailable, "etcd unavailable: %s", msg)
	}
	ee := rpctypes.Error(err)
	var etcdErr rpctypes.EtcdError
	if errors.As(ee, &etcdErr) {
		msg = etcdErr.Error()
		if etcdErr.Code() == codes.InvalidArgument && errors.Is(ee, rpctypes.ErrRequestTooLarge) {
			return errs.New(codes.ResourceExhausted, "etcd: %s", msg)
		}
	}
	code := codes.Unknown
	if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else if errors.As(ee, &etcdErr) {
		code = etcdErr.Code()
	}
	switch code {
	case codes.ResourceExhausted, codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated:
		return errs.New(code, "etcd: %s", msg)
	case codes.Canceled:
		// The client was closed under the call.
		return errs.New(codes.Unavailable, "etcd unavailable: %s", msg)
	case codes.Unknown, codes.Internal, codes.DataLoss:
		return errs.New(codes.Internal, "etcd: %s", msg)
	}
	return errs.New(codes.Unavailable, "etcd unavailable: %s", msg)
}
