// Package siloapi is the part of the grain runtime that only the silo uses:
// running messages that another silo forwarded, and giving activations up
// when ownership moves. It is kept out of grain's public API, so that agents
// and SDK users see only what they may call; package grain registers it
// (Of), package cluster uses it.
package siloapi

import (
	"context"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Runtime is a grain runtime seen from its silo. Methods are safe for
// concurrent use.
type Runtime interface {
	// AskRemote runs a REQUEST another silo forwarded here after hops hops.
	AskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) (*agentsilov1.AgentMessage, error)
	// SendRemote delivers a ONE_WAY message or EVENT another silo
	// forwarded here.
	SendRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int) error
	// AskRemoteAsync is AskRemote that returns once the request is queued
	// at its activation (or forwarded on), and calls done with the result,
	// once: the transport calls it in the sender's order.
	AskRemoteAsync(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, done func(*agentsilov1.AgentMessage, error))
	// TryAskRemote is AskRemote without a goroutine waiting for the reply,
	// for a live activation only; false if it did nothing.
	TryAskRemote(ctx context.Context, msg *agentsilov1.AgentMessage, hops int, done func(*agentsilov1.AgentMessage, error)) bool
	// Rehome deactivates, after their current turn, the activations whose
	// address keep rejects (the view moved them away).
	Rehome(ctx context.Context, keep func(key string) bool) error
	// Release deactivates the activation of key, if any, and returns once
	// it has ended.
	Release(ctx context.Context, key string) error
}

// Of returns the silo-only API of rt, a *grain.Runtime. Package grain sets
// it at init.
var Of func(rt any) Runtime
