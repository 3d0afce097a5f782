// Package topics is agentsilo's publish/subscribe: hierarchical topics
// owned like addresses, subscriptions with wildcard patterns, durable
// queues with acknowledged delivery, retries with backoff and dead
// letters.
//
// The files, in the order a message meets them:
//
//	name.go        topics (owner:a.b.c) and patterns (* one segment, #
//	               zero or more), and the matcher
//	service.go     Service: its lifecycle, the registry of subscriptions it
//	               follows, the engines of the subscriptions it delivers
//	publish.go     publishing: a batcher writes many publishes per
//	               Store.Append
//	subscribe.go   the subscription, session and dead-letter calls
//	store.go       Store, the small interface of the durable part: a queue
//	               per subscription, the registry, dead letters
//	etcdstore.go   EtcdStore, the Store of a cluster: its keys, the
//	               subscriptions and their registry
//	etcdappend.go  its publishes and acknowledgements, with group commit
//	               (shared etcd transactions)
//	etcdqueue.go   its queues: following, retries, dead letters
//	etcdsession.go its session subscriptions, on a lease
//	jsstore.go     JetStreamStore, the Store of a cluster on NATS JetStream
//	               instead of etcd: its buckets and the registry
//	jsqueue.go     its publishes, queues and dead letters
//	jskeeper.go    its heartbeat, session expiry and sweeping
//	memstore.go    memStore, its twin in memory, for tests
//	engine.go      the delivery of one subscription on the silo that owns
//	               it: lanes per publisher, outcomes, the full flag
//	config.go      Config and its defaults, Observer
//
// Publishing is durable before it returns: Append writes one copy per
// matching subscription, conditional on the subscriptions' version of the
// topic's owner, which Subscribe bumps; a publisher that has not seen a new
// subscription yet gets a StaleError, waits for its registry and matches
// again, so that nothing published after Subscribe returned misses it.
//
// A silo wires it so (package cluster does; the runtime takes the Service
// as its grain.TopicService, and delivers through the runtime's Ask):
//
//	svc, err := topics.New(topics.Config{
//		Store: topics.NewEtcdStore(etcd.Client(), prefix, logger),
//		Owns:  func(id string) bool { return router.owns("topics/" + id) },
//	})
//	...
//	rcfg.Topics = svc
//	rt, err := grain.New(rcfg, reg)
//	...
//	svc.Start(rt.Ask)
//	...
//	svc.Close(ctx) // before rt.Close: deliveries in flight settle
//
// and calls svc.Rebalance when the membership's view changes.
//
// A client session subscribes through its gateway (SubscribeSession, with
// the gateway's push into the session's backlog): the silo holding the
// session delivers its subscription, a message being acknowledged once it
// is in the backlog. The subscription ends with the session: Unsubscribe
// at its Close, EndSession when the gateway forgets it, and, if the silo
// dies, its member's lease (Store.SubscribeSession), after which the
// subscription's owner in the view prunes it (Store.Prune).
package topics
