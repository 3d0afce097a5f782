// Package gateway is a silo's front door for clients: the
// agentsilov1.Gateway gRPC service, with the standard health service,
// server reflection and the ACL admin service on the same port. The silo
// (package cluster) makes one; the Go SDK (package client) and the client
// CLI talk to it.
//
// Files: gateway.go (Gateway, Config, unary calls), sessions.go (the client
// sessions and their backlogs: the runtime's siloapi.SessionRouter),
// stream.go (a client's Session stream: Hello and Welcome, its reader and
// the frames it sends, the budget that holds a client back), session.go
// (a session's queue and its writer: multiplexed calls, pushes in order,
// re-attach with the resume token), clientgrain.go
// (the client grain: every call checked against the ACL), reminders.go (the
// reminder listing), limits.go (what one client and one principal can make
// the gateway hold: pending results, sessions, calls, the Hello deadline),
// codec.go (an undecodable request is InvalidArgument, a frame that cannot
// be encoded never breaks a stream).
//
// Wiring: the sessions are made before the runtime, the gateway after it.
//
//	sessions, err := gateway.NewSessions(cfg)
//	siloapi.Wire(&rcfg, siloapi.Wiring{Sessions: sessions}) // in the silo
//	rt, err := grain.New(rcfg, reg)
//	gw, err := gateway.New(cfg, rt, sessions)
//	go gw.Serve(lis)
//	defer gw.GracefulStop()
//
// A session is addressable (`Session:<principal>:<id>`, and `...@<silo>` in
// a cluster): agents push to it with Send. While its stream is broken it
// keeps what it is sent (up to Config.SessionBacklog messages, for
// SessionBacklogAge) and delivers it in order when the client re-attaches.
package gateway
