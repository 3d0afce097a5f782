// Package protocol holds the constants of agentsilo's wire protocol that the
// SDK (package client) and the silo both use: gRPC metadata and trailer
// keys, ports and sizes. Defining them once keeps the two sides from
// drifting apart.
package protocol

const (
	// APIKeyHeader is the metadata key a client sends its API key in.
	APIKeyHeader = "x-api-key"
	// PrincipalHeader is the metadata key of a self-declared principal on
	// unary calls to a gateway without authentication (sessions declare it
	// in their Hello).
	PrincipalHeader = "x-agentsilo-principal"
	// DrainedTrailer marks a session stream that a draining gateway ended:
	// calls the client sent on it that got no result were never started,
	// so the SDK may send them again through another gateway.
	DrainedTrailer = "x-agentsilo-drained"

	// DefaultGatewayPort is the gateway's port; a client address without
	// a port gets it.
	DefaultGatewayPort = "7070"

	// DefaultMaxMessageSize is the largest encoded AgentMessage accepted
	// by default: 4 MiB.
	DefaultMaxMessageSize = 4 << 20
	// FrameOverhead is added to the message size limit for gRPC frames, so
	// that a message just over the limit is answered per call with
	// ResourceExhausted instead of breaking the stream.
	FrameOverhead = 64 << 10
)

// Clip shortens a value a client sent before it is echoed in an error
// message.
func Clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
