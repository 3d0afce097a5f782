// Package acl is agentsilo's access control: rules and groups,
// their evaluation, the stores that keep them, and the admin service that
// changes them.
//
// A Rule grants Permission flags (Message, Configure, Read, Admin, Approve, Audit; All) to
// the callers matching its CallerPattern (a principal, `*` or
// `group:name`) on the agents whose owner matches its OwnerPattern and whose
// alias matches its AgentPattern (`*`, `prefix*` or a name; case-insensitive).
// A check (Policy.Check) allows a caller's own agents without looking at a
// rule; otherwise the first rule that matches decides, and with none the
// answer is no. While no rules are set, SeedRule applies:
// `system:* -> * -> Message,Read`.
//
//	d, err := acl.ParseDocument(fileBytes) // an ACL file's JSON
//	p, err := acl.Compile(d)
//	dec := p.Check(&acl.Caller{Principal: "alice"}, "bob", "ticket-1", acl.Message)
//	if !dec.Allowed { ... } // dec.Reason, dec.Rule explain it
//
// The files follow the parts: permission.go and pattern.go (the syntax),
// rule.go (rules and the document), policy.go (evaluation), store.go (the
// Store interface and MemStore), etcdstore.go (the cluster's store, a
// compare-and-swap on the etcd revision, watched by every silo),
// authority.go (a silo's watched, always-available view, and changes), and
// admin.go (the agentsilov1.AclAdmin gRPC service). The gateway's client
// sessions enforce the checks (package cluster).
package acl
