// Package client is the Go SDK of agentsilo: a program's session with a
// cluster, through its gateways, to call agents and to run the cluster.
//
// A Client is the session and its messaging: Ask, Send and Event call an
// agent, AskTyped calls a typed skill, and agents push to the session's
// Address, which arrives on Messages. Everything else is reached from the
// Client by concern, each a small value with short method names:
//
//	c.Agents()     create an agent, list the active ones, an agent's
//	               configuration, state, reminders, deactivation
//	c.Topics()     publish, subscribe (an agent, or this session),
//	               dead letters, broadcast
//	c.Directory()  the service directory: search, list, outside entries
//	c.Memory(addr) a working memory agent: put, get, list, search
//	c.ACL()        the access control list: rules, groups, Check
//	c.Admin()      the cluster: its members, the types it hosts, declared
//	               types
//
// The concerns share their shapes. What a call may leave out is a
// CallOption (After, Limit, IfRevision, IfETag, MaxAttempts, At, DryRun,
// InGroups; each method says which it takes). A list that pages returns a
// Page, its Items and the Next cursor ("" on the last page). A call that
// reads several values returns a struct naming them (ACLRules,
// AgentState, AgentConfig, Applied).
//
//	c, err := client.Dial(ctx, []string{"127.0.0.1:7070"}, client.WithPrincipal("alice"))
//	if err != nil { ... }
//	defer c.Close()
//	reply, err := c.Ask(ctx, "Echo:one", &client.Message{Message: "hi"})
//	if errors.Is(err, client.ErrNotFound) { ... } // no such agent type
//	_, err = c.Topics().Subscribe(ctx, "Inbox:in", "orders", "orders.#", client.MaxAttempts(3))
//	page, err := c.Directory().List(ctx, client.DirectoryQuery{Kind: "mcp"}, client.Limit(50))
//	// page.Items; while page.Next != "", client.After(page.Next) lists on
//
// Given several gateway addresses, a client whose stream breaks
// re-attaches through the next one: calls in flight fail with
// Unavailable, later calls go through, and the session's pushes sent
// meanwhile arrive if the gateway still holds the session.
//
// Every error carries a gRPC code: test it with errors.Is against
// ErrNotFound and the other sentinels, or read it with status.Code. What a
// call would send is checked first: a message over WithMaxMessageSize is
// ResourceExhausted, a string field that is not valid UTF-8 or an option
// a call does not take is InvalidArgument, and nothing is sent. The
// package links no part of the silo: only the wire protocol and the error
// table. A gateway address without a port is DefaultPort (7070).
//
// Ask, Send and Event run in OpenTelemetry client spans
// (WithTracerProvider; default the global provider) and carry the W3C
// traceparent of the caller's trace in the message, so the cluster
// continues it (internal/tracing).
//
// The code, by file:
//
//	client.go     Dial, Ask, Send, Event, Address, Messages, Close
//	session.go    the session's stream: re-attaching through the gateways
//	typed.go      AskTyped: a typed skill call, its arguments checked first
//	call.go       the shared shapes: CallOption, Page
//	agents.go     Agents
//	topics.go     Topics
//	directory.go  Directory
//	memory.go     Memory (also reached from an agent, with NewMemory)
//	acl.go        ACL
//	admin.go      Admin, and the declared types' DeclaredType, Applied
//	types.go      what the calls return: plain structs converted from the
//	              wire, so a program imports no protobuf package (Message
//	              excepted: it is the message type agents share)
//	encode.go     what a call would send, checked before it is sent
//	options.go    the options of Dial: principal, API key, TLS, timeout,
//	              message size, a push callback, tracing
//
// The examples (Example, ExampleAgents_List, ExampleTopics_Publish,
// ExampleDirectory_Search, ExampleACL_Check, ...) walk through the main
// flows.
package client
