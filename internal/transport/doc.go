// Package transport carries messages between silos: one long-lived gRPC
// stream (the Peer service) from each silo to each peer it sends to, with
// requests, one-way messages and events going out on it and replies coming
// back on the same stream. The silo (package cluster) sends with Ask and
// Send and handles what peers send through a Handler (its router).
//
// Files: transport.go (Transport, Config, Handler, Ask, Send), peer.go (the
// outbound stream to one peer: its bounded queue, its sender, reconnects,
// closing an idle stream), queue.go (the bounded queues, which grow on
// demand), batch.go (filling one stream message from the queue: batches
// form by themselves when busy; the writer that lets a lone envelope be
// written by its own goroutine), inbound.go (the streams peers open to this
// silo),
// workers.go (parked goroutines that run inbound requests), cancel.go (a
// cancelled Ask's notice to its peer, and the contexts of inbound requests
// that it cancels).
//
// The peer port is trusted: what arrives on it is an agent-to-agent call,
// without the gateway's authentication or ACL, so it must be reachable by
// silos only.
package transport
