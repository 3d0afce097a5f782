package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/cluster/etcdstore"
	"github.com/agentsilo/agentsilo/grain"
)

// aclLoadWait bounds how long a starting silo waits for the ACL's first
// load before serving anyway (checks of other owners' agents are Unavailable
// until it arrives).
const aclLoadWait = 10 * time.Second

// startACL starts the silo's view of the cluster's ACL, kept in etcd under
// the silo's prefix and seeded from file (the --acl-file's JSON) when etcd
// holds none yet.
func startACL(ctx context.Context, e *etcdstore.Store, file string, onDenied func(acl.Permission), log *audit.Log, logger *slog.Logger) (*acl.Authority, error) {
	cfg := acl.Config{Store: acl.NewEtcdStore(e.Client(), e.Prefix(), logger), OnDenied: onDenied, Logger: logger, Audit: log}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("acl file: %w", err)
		}
		d, err := acl.ParseDocument(b)
		if err != nil {
			return nil, fmt.Errorf("acl file %s: %w", file, err)
		}
		cfg.Seed = &d
	}
	a, err := acl.NewAuthority(cfg)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, aclLoadWait)
	defer cancel()
	if err := a.Start(wctx); err != nil {
		if ctx.Err() != nil {
			a.Close()
			return nil, err
		}
		logger.Warn("acl: not loaded from etcd yet; serving, and other owners' agents are Unavailable until it is", "err", err)
	}
	return a, nil
}

// aclAuthorizer checks agents' messages to other owners' agents against
// the ACL, as the principal of their call chain (grain.Authorizer): the
// principal's groups are the ACL's (those of its credentials stay at the
// gateway).
type aclAuthorizer struct{ a *acl.Authority }

func (z aclAuthorizer) AuthorizeMessage(_ context.Context, principal string, to grain.Address) error {
	return z.a.Authorize(&acl.Caller{Principal: principal}, to.Type, to.Owner, to.Alias, acl.Message)
}

// AuthorizePermission implements grain.PermissionAuthorizer, for
// Host.Authorize.
func (z aclAuthorizer) AuthorizePermission(_ context.Context, principal string, to grain.Address, permission string) error {
	need, err := acl.ParsePermission(permission)
	if err != nil {
		return err
	}
	return z.a.Authorize(&acl.Caller{Principal: principal}, to.Type, to.Owner, to.Alias, need)
}
