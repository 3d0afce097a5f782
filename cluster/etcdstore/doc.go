// Package etcdstore is a silo's etcd: Start connects to an external etcd
// cluster, or starts an embedded one (the single-machine default) and
// connects to it, and Store hands the client and the key prefix to the
// parts that keep durable state there (membership, reminders, the ACL,
// agent configurations). ConfigStore is the agent configuration store
// (CreateAgent, Host.Config). The compactor (compact.go) compacts etcd's
// history every CompactInterval, so that what is written and deleted
// steadily does not grow it.
package etcdstore
