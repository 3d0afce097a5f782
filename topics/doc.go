// Package topics is agentsilo's publish/subscribe. Agents and clients
// publish messages to hierarchical topics that belong to an owner, as
// addresses do (`acme:orders.created.eu`); durable subscriptions, each with
// a pattern over one owner's topics (`orders.*.eu`, `orders.#`), deliver
// every matching message (stored once, in its owner's log, a subscription
// being a position in it) to their agents at least once, in the order each publisher published, with retries, backoff and
// dead letters.
//
// Why topics rather than Send: a publisher does not know its subscribers,
// a publish is durable before it returns (a subscriber that is down, busy
// or being moved gets the message later), and a subscriber controls
// redelivery by what its handler returns.
//
// # Using it
//
// Users do not call this package to publish or subscribe: an agent does
// through its grain.Host, a program through the client SDK.
//
//	// In an agent's turn: subscribe itself, publish (a relative topic is
//	// the agent's owner's).
//	err := h.Subscribe(ctx, "audit", "orders.#", grain.WithMaxAttempts(3))
//	id, err := h.Publish(ctx, "orders.created.eu", &grain.Message{Message: "order 42"})
//
//	// From a program, through a silo's gateway (package client):
//	res, err := c.Topics().Publish(ctx, "acme:orders.created.eu", &client.Message{Message: "order 42"})
//	sub, err := c.Topics().SubscribeSession(ctx, "orders.#") // this session's, while it lives
//
// A delivery is a request to the subscriber's OnMessage (or, several at
// once, to a grain.BatchHandler's OnMessages) with Message.Topic,
// Message.Subscription and Message.Attempt set, and the same Message.Id on
// every attempt. Its result is the outcome: nil acknowledges it,
// grain.Retry(after, reason) or any other error asks for it again (counting
// an attempt; past the subscription's maximum it becomes a dead letter),
// grain.Poison(reason) makes it a dead letter at once. Several agents under
// one subscription name compete for its messages; each subscription gets
// every message.
//
// What holds:
//   - A publish returns once it is durable, and everything
//     published after Subscribe returned (through any silo) reaches the
//     subscription.
//   - At least once: a message is delivered again until acknowledged, after
//     a crash or a move of the subscription to another silo too.
//   - A publisher's messages reach a subscription one at a time, in order.
//   - A subscription's backlog is bounded (Config.MaxBacklog): past it,
//     publishers to its topics wait, and then fail with ResourceExhausted.
//   - A message with an idempotency key is queued once within the store's
//     window, however often it is published.
//
// # Where it runs
//
// A silo (package cluster) hosts one Service and wires it: the
// subscriptions and queues are kept in etcd, or in NATS JetStream
// (--topic-store), and each subscription is delivered by one silo of the
// cluster, placed as an agent is. The silo's TopicsConfig holds the
// settings of Config. A Service made by New outside a silo keeps them in
// this process's memory, for a runtime of its own (see the Example).
//
// The files: name.go (topics and patterns), service.go (the Service's
// lifecycle and the registry of subscriptions it follows), publish.go (a
// batcher writes many publishes per store append), subscribe.go (the
// subscription, session and dead-letter calls), engine.go (the delivery of
// one subscription on the silo that owns it: lanes per publisher, outcomes,
// the full flag), tracing.go (the publish and deliver spans of messages in
// a trace), config.go (Config and its defaults, Observer). Where the
// subscriptions and queues are kept is internal/topicstore's.
package topics
