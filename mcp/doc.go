// Package mcp makes every agent of an agentsilo cluster a set of tools for
// any Model Context Protocol client (a model host, an IDE, an agent
// framework), over the official Go SDK's streamable HTTP transport
// (github.com/modelcontextprotocol/go-sdk).
//
// Each skill of a registered type (its grain.TypeInfo) is a tool, with the
// skill's description and a JSON input schema (the skill's InputSchema, or
// {"message": string}). A tool call is an Ask to the agent it names, on
// behalf of the caller's principal, with the gateway's authentication and
// ACL:
//
//	config.go  Config, DefaultConfig, Validate
//	server.go  the Server: New, Serve, Close; AddTool and CallerFrom for
//	           tools of the silo's own
//	http.go    the endpoints (/mcp for every agent, /mcp/{Type}/{owner}/{alias}
//	           for one), authentication, the listing's ACL
//	tools.go   tools from TypeInfo: names and schemas
//	args.go    a call's arguments: the agent argument, schema validation
//	call.go    a call as an Ask: progress from pushes, cancellation, results
//	errors.go  refusals as JSON-RPC errors
//	directory_tools.go  the service directory's tools on /mcp
//	sessions.go  Sessions and Tools: the open sessions and the agents'
//	           tools, for the silo's dashboard
//	remote.go  the built-in agent type MCP: an outside MCP server (or
//	           another silo's endpoint) as an agent
//
// A silo serves it with --mcp-addr (cluster.SiloConfig.MCP); docs/mcp.md
// describes the mapping and how to call it:
//
//	go run ./cmd/silo --demo --mcp-addr 127.0.0.1:9191
//
// and an MCP client pointed at http://127.0.0.1:9191/mcp lists Echo_echo,
// Counter_count, Progress_think, ... and calls them.
package mcp
