// Package a2a makes every agent of an agentsilo cluster an A2A agent
// (the Agent2Agent protocol, spec 1.0, with 0.3 JSON-RPC for older
// clients), and lets agents call A2A agents outside the cluster.
//
// # Serving agents over A2A
//
// A silo serves A2A when its configuration names an address (the silo's
// --a2a-addr, cluster.SiloConfig.A2A.Addr): each agent `Type:owner:alias`
// is then an A2A endpoint under /a2a/Type/owner/alias with its agent card,
// and a message sent to it becomes an Ask to the agent on behalf of the
// caller. Tasks live in etcd, so any silo answers for any task, and a
// silo that dies has its running tasks failed by the others.
//
// Callers authenticate as on the gateway, with the same package (auth):
// an API key (`x-api-key`, or `Authorization: Bearer KEY`) or a client
// certificate; without either, they declare their principal in the
// `x-agentsilo-principal` header, and the server then serves only
// loopback unless --insecure (Config.Validate refuses otherwise, see the
// Config example). The cluster's ACL applies to every call.
//
// # Calling A2A agents outside the cluster
//
// The agent type A2A (RemoteType, registered with RegisterRemote, which a
// silo does with the defaults) makes a remote A2A agent an agent: create
// `A2A:owner:alias` with its card URL (ConfigCardURL) and credentials,
// and Ask it like any other (see the remoteAgent example). Its answers
// that ask for more input are followed, bounded by RemoteOptions.
//
// # Inside
//
// The protocol layer is the official Go SDK's (github.com/a2aproject/a2a-go/v2):
// its request handler in cluster mode, its JSON-RPC, HTTP+JSON, gRPC and
// 0.3 compatibility transports, its agent card handler and its push sender.
// This package gives it what makes a silo cluster of it:
//
//	executor.go   the AgentExecutor: a message is an Ask to the endpoint's
//	              agent on behalf of the caller; pushes become events
//	taskstore.go  the task store in etcd (version = mod revision), shared by all silos
//	eventqueue.go the event queues: in memory on the silo running an
//	              execution, a watch on the task's key everywhere else
//	work.go       the work queue: executions run on the silo that took the request
//	ctl.go        leases, departed silos' tasks failed, cancels across silos
//	pushstore.go  push notification configs in etcd
//	inbox.go      the turn's sender address that collects what the agent pushes
//	http.go       the paths: endpoints, cards, the directory
//	grpc.go       the gRPC binding on the same port; the agent is the request's tenant
//	corners.go    what the spec says and the SDK's handler does not (ListTasks page size, finished tasks, 0.3 error type)
//	guard.go      authentication (package auth) and the ACL per method
//	card.go       agent cards from the registry's TypeInfo
//	remote.go     the built-in agent type A2A, a remote A2A agent as an agent
//	follow.go     following a remote task past its first answer; loop protection
//	background.go background follows, durable in the agent's state and a reminder
//	observe.go    the A2A type's counters, spans and outgoing trace context
//
// A silo serves it with --a2a-addr (cluster.SiloConfig.A2A); the README's
// section "A2A" describes the mapping and how to call it:
//
//	go run ./cmd/silo --demo --a2a-addr 127.0.0.1:9090
//	curl http://127.0.0.1:9090/a2a/Echo/dev/e1/.well-known/agent-card.json
package a2a
