package auditstore

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/errs"
)

// Open returns the store spec names, as a silo's --audit-store flag takes
// it: "" or "etcd" for the etcd store on etcdClient under prefix, a
// postgres:// URL for a PostgreSQL store on a pool of its own.
func Open(ctx context.Context, spec string, etcdClient *clientv3.Client, prefix string) (audit.Store, error) {
	switch {
	case spec == "" || spec == "etcd":
		if etcdClient == nil {
			return nil, errs.New(codes.InvalidArgument, "audit store etcd: no etcd client")
		}
		return NewEtcd(etcdClient, prefix), nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		s, err := OpenPostgres(ctx, spec)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		scheme = spec
	}
	return nil, errs.New(codes.InvalidArgument, "audit store %q: want \"etcd\" or a postgres:// URL", clip(scheme, 64))
}

// clip cuts s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
