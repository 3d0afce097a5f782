// Package auditstore keeps the audit log (package audit) in etcd or in
// PostgreSQL. Each partition's head is moved by a compare-and-swap, so
// that silos appending to one partition at once never fork its chain, and
// each record's key is written once, so that an append repeated after a
// crash writes nothing. Open picks the store from the silo's
// --audit-store:
//
//	store, err := auditstore.Open(ctx, "etcd", etcdClient, "/agentsilo/")
//	log, err := audit.New(audit.Config{Store: store})
package auditstore
