// Package topicstore is where a topics.Service keeps subscriptions, their
// queues and dead letters: the Store interface and its three
// implementations, and the grammar of topic names and patterns they share
// with package topics. Package cluster picks one and wires it into the
// silo's Service (Wire); users see none of it.
//
// The files:
//
//	name.go        topics (owner:a.b.c) and patterns (* one segment, #
//	               zero or more), and the matcher
//	store.go       Store, the small interface of the durable part: a queue
//	               per subscription, the registry, dead letters
//	logrecord.go   a message as its topic owner's log keeps it, once: its
//	               entry and the subscriptions it was matched to
//	wire.go        Wiring: the store and clock a silo gives its Service
//	etcdstore.go   EtcdStore, the Store of a cluster: its keys, the
//	               subscriptions and their registry
//	etcdappend.go  its publishes and acknowledgements, with group commit
//	               (shared etcd transactions)
//	etcdlog.go     its log per topic owner and cursor per subscription:
//	               following a queue, the cursor, removing what all passed
//	etcdqueue.go   its retries, dead letters, replay
//	etcdsession.go its session subscriptions, on a lease
//	jsstore.go     JetStreamStore, the Store of a cluster on NATS JetStream
//	               instead of etcd: its buckets and the registry
//	jslog.go       its log stream and the durable consumer of each
//	               subscription
//	jsqueue.go     its publishes, queues and dead letters
//	jskeeper.go    its heartbeat, session expiry and sweeping
//	memstore.go    Memory, its twin in memory: a Service's default and the
//	               stores' conformance tests' reference
//
// Publishing is durable before Append returns: it writes each message once,
// in its topic owner's log, naming the subscriptions it matched,
// conditional on the subscriptions' version of the
// topic's owner, which Subscribe bumps; a publisher that has not seen a new
// subscription yet gets a StaleError, waits for its registry and matches
// again, so that nothing published after Subscribe returned misses it.
package topicstore
