package cluster

import (
	"cmp"
	"net/url"
	"regexp"
	"strings"

	"github.com/agentsilo/agentsilo/cluster/etcdstore"
)

// describeStorage is what the startup log says of where the silo keeps
// its durable state: its etcd (embedded, with its data directory, or the
// external endpoints) and its agents' state store, without a password.
func describeStorage(cfg *SiloConfig) []any {
	d := etcdstore.DefaultConfig()
	addr, dir := cmp.Or(cfg.Etcd.EmbeddedAddr, d.EmbeddedAddr), cmp.Or(cfg.Etcd.DataDir, d.DataDir)
	etcd := "embedded on " + addr + " in " + dir + " (this silo serves the cluster's etcd: it must run for the others to work)"
	if len(cfg.Etcd.Endpoints) > 0 {
		etcd = strings.Join(cfg.Etcd.Endpoints, ",")
	}
	store := cfg.StateStore
	if store == "" {
		store = "etcd"
	}
	prefix := cmp.Or(cfg.Etcd.Prefix, d.Prefix)
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/" // as the silo's etcd store takes it
	}
	return []any{"etcd", etcd, "etcd_prefix", prefix, "state_store", redactStore(store)}
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

// redactStore hides the password of a state store's URL or key=value
// connection string.
func redactStore(spec string) string {
	if u, err := url.Parse(spec); err == nil && u.Scheme != "" && u.Host != "" {
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return dsnPassword.ReplaceAllString(spec, "${1}xxxxx")
}
