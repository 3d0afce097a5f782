// Package agentsilov1 is the generated Go code of agentsilo's wire protocol
// (package agentsilo.v1), plus AgentMessage.Response. Regenerate it with
// `go generate ./proto`.
package agentsilov1
