// Package client is the Go SDK of agentsilo: a session with a cluster
// through its gateways.
//
//	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithPrincipal("alice"))
//	if err != nil { ... }
//	defer c.Close()
//	reply, err := c.Ask(ctx, "Echo:one", &client.Message{Message: "hi"})
//	if errors.Is(err, client.ErrNotFound) { ... } // no such agent type
//
// A session has an address (Client.Address) that agents send to, to push
// messages to the client; they arrive on Client.Messages, or at the callback
// given with WithOnMessage. Given several gateway addresses, a client whose
// stream breaks re-attaches through the next one: calls in flight fail with
// Unavailable, later calls go through, and the session's pushes sent
// meanwhile arrive if the gateway still holds the session.
//
// What a Client does, by file:
//
//	client.go     Dial, Ask, Send, Event, the session's Address and Messages,
//	              CreateAgent and the cluster's listings (Agents, Members,
//	              Reminders), Close
//	session.go    the session's stream: re-attaching through the gateways
//	typed.go      AskTyped: a typed skill call, its arguments checked first
//	agents.go     an agent's configuration, state, reminders and
//	              deactivation; the agent types the cluster hosts (Types)
//	types.go      what the calls return: AgentInfo, Member, Reminder,
//	              AgentType, ACLRule, Decision, DirectoryEntry,
//	              PublishResult, Subscription, DeadLetter... plain structs
//	              converted from the wire here, so a program using the SDK
//	              imports no protobuf package (Message excepted: it is the
//	              message type agents share)
//	topics.go     Topics (Client.Topics): Publish, subscriptions (an
//	              agent's or the session's),
//	              dead letters, Broadcast
//	directory.go  the service directory: Search, listings, entries
//	memory.go     an agent's working memory (Memory)
//	acl.go        ACL (Client.ACL): rules, groups, and Check, which
//	              explains a decision
//	options.go    the options of Dial: principal, API key, TLS, timeout,
//	              message size, a push callback
//
// The examples (Example, ExampleClient_AgentsOf, ExampleTopics_Publish,
// ExampleClient_CheckACL, ExampleClient_Search, ...) walk through the main
// flows: a call and its errors, pushes, listings, topics, the ACL, the
// directory.
//
// Every error carries a gRPC code: test it with errors.Is against ErrNotFound
// and the other sentinels, or read it with status.Code. The package links no
// part of the silo: only the wire protocol and the error table.
//
// A gateway address without a port is DefaultPort (7070). What a call would
// send is checked first: a message over WithMaxMessageSize is
// ResourceExhausted, a string field that is not valid UTF-8 is
// InvalidArgument (encode.go), and nothing is sent.
//
// Ask, Send and Event run in OpenTelemetry client spans (WithTracerProvider;
// default the global provider) and carry the W3C traceparent of the
// caller's trace in the message, so the cluster continues it (internal/tracing).
package client
