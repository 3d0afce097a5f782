// Package grain is agentsilo's programming model and local execution engine.
//
// An agent type is a Factory registered under a type name. An agent is
// addressed as `Type:owner:alias`; it exists virtually and is activated on the
// silo when the first message for it arrives. Each activation runs its own
// bounded mailbox on the runtime's dispatcher (mailbox.go), handles one
// message at a time, and is deactivated after IdleTimeout without messages
// (the type's, if its TypeInfo sets one).
//
//	reg := grain.NewRegistry()
//	reg.Register("Echo", func(h grain.Host) (grain.Agent, error) { return echo{}, nil })
//	rt, err := grain.New(grain.DefaultConfig(), reg)
//	...
//	reply, err := rt.Ask(ctx, &grain.Message{To: "Echo:alice:one", Message: "hi"})
//
// where echo implements OnMessage:
//
//	func (echo) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
//		r := m.Response()
//		r.Message = m.Message
//		return r, nil
//	}
//
// Agents reach each other through their Host (Ask, Send, Event, Broadcast),
// get timers (RegisterTimer), keep state that outlives the activation
// (LoadState, SaveState, State[T]), and may implement Activator, EventHandler and
// Deactivator for the other lifecycle callbacks. Errors carry gRPC codes; see
// package errs.
//
// A Runtime made with New hosts every agent itself (the Example runs one).
// In a silo (package cluster) the same runtime is placed across the
// cluster: the silo wires in where each address lives, how client sessions
// are reached and a cluster-wide broadcast, through package
// internal/siloapi, which is not part of this API: an agent sees the
// cluster only through its Host.
package grain
