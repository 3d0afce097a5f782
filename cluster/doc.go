// Package cluster is the silo: it wires the grain runtime to the parts of a
// cluster and runs their lifecycle (Silo: NewSilo, Start, Err, Close), and it
// routes: it decides which silo owns an address and carries messages there.
//
// The parts, each a package of its own:
//
//	cluster/etcdstore    etcd, embedded or external; agent configurations
//	internal/membership  who the members are: etcd leases, gossip, fencing
//	internal/transport   gRPC streams between silos
//	internal/gateway     the client gateway: sessions, authentication, ACL
//	internal/dashboard   the web view at /ui
//
// (the last four under internal/: a program never imports them, it
// configures them through SiloConfig)
//
// and here: config.go (SiloConfig, the user's settings, and
// DefaultSiloConfig, each default explained), subconfig.go (each part's
// configuration, made from those settings), silo.go (the lifecycle: NewSilo,
// Start, Err), silo_build.go (the parts made in dependency order and wired
// together), silo_close.go (graceful shutdown), testhooks.go (fault
// injection, built only with the agentsilo_testhooks tag), placement.go (Owner:
// rendezvous hashing over the view, pinned by a contract test), router.go
// (the runtime's siloapi.Placement: routing, Claim and the single-activation
// handover), views.go (following the membership's views and sweeping what
// they move), peer.go (what peers send this silo), sessions.go (messages for
// client sessions on other silos), info.go (the cluster as the gateway lists
// it), reminders.go (reminders follow ownership), silo_acl.go (the ACL kept in
// etcd, and the grain.Authorizer that checks agents' messages to other
// owners against it), security.go (mutual TLS between silos, the gossip
// key, and the refusal to expose the peer and gossip ports without them),
// metrics.go, logging.go (observability).
//
// One Ask from a client, end to end: the SDK sends it on its session stream
// (package client); the gateway authenticates the client, checks the ACL and
// hands it to the runtime (gateway.Gateway.Session, dispatch); the runtime
// asks the router where the address lives (router.Route); for another silo,
// router.Forward sends it on the peer stream (transport.Transport.Ask); the
// owner's transport (over mutual TLS, the peer's certificate naming it) hands
// it to peerHandler.HandleRequest, which gives it to its runtime (siloapi.Runtime.AskRemote, the runtime's silo-only API): the activation is claimed
// (router.Claim) if it is not live, runs the turn, and the reply travels
// back the same way.
package cluster
