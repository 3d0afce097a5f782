// Package cluster is the silo around the grain runtime: its lifecycle
// (Silo: NewSilo, Start, Close), its etcd (StartEtcd, embedded or external)
// and the client gateway. The parts of a multi-silo cluster are here as
// tested building blocks not yet wired into the Silo: membership (Membership:
// gossip for detection, silo records bound to etcd leases for authority,
// self-fencing), placement (Owner: rendezvous hashing, pinned by a contract
// test) and the silo-to-silo transport.
//
// The gateway (Gateway) serves agentsilov1.Gateway over gRPC, with the
// standard health service and server reflection on the same port. Clients
// open a Session stream: a Hello answered by a Welcome with the session's
// address (`Session:<principal>:<id>`) and a resume token, then calls
// multiplexed by call id, answered concurrently, and messages that agents send
// to the session's address pushed in order. A session whose stream breaks
// keeps what it is sent (up to GatewayConfig.SessionBacklog messages, for
// SessionBacklogAge) and delivers it when the client re-attaches with the
// token.
//
// The runtime needs its SessionRouter before the gateway exists, so the two
// are wired through a SessionRelay:
//
//	relay := new(cluster.SessionRelay)
//	rcfg := grain.DefaultConfig()
//	rcfg.Sessions = relay
//	rt, err := grain.New(rcfg, reg)
//	...
//	gw, err := cluster.NewGateway(cluster.DefaultGatewayConfig(), rt) // binds relay
//	...
//	lis, err := net.Listen("tcp", "127.0.0.1:7070")
//	...
//	go gw.Serve(lis)
//	defer gw.GracefulStop()
//
// The gateway authenticates its clients (auth.go: API keys sent as
// `x-api-key` metadata, or client certificates under mutual TLS); without an
// AuthConfig the principal is self-declared, and the gateway serves only
// loopback addresses unless GatewayConfig.Insecure is set. Each session is
// its client's client grain (clientgrain.go): it resolves relative
// addresses, sets the sender itself, and checks every call against the
// cluster's ACL (package acl), which the Silo keeps in etcd and watches
// (silo_acl.go). The gateway port also serves the ACL admin service.
//
// Observability: each Silo serves Prometheus metrics at /metrics on its
// HTTP address from a registry of its own (metrics.go: the runtime reports
// through grain.Observer, the ACL and reminders through small hooks, and
// what can be read when scraped is read then); it starts OpenTelemetry spans
// at the gateway and between silos, carrying the W3C traceparent inside the
// messages (tracing.go); and its logger's records carry trace_id and
// span_id (TraceLogHandler, logging.go).
package cluster
