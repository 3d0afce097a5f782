package inbox

// Slot is where a silo puts its Inboxes in the Deps of its A2A and MCP
// servers: a2a.Deps and mcp.Deps embed a Slot under an unexported name, so
// that users do not see it (they cannot make Inboxes: only the silo can put
// them in front of its runtime's session router), while the silo and the
// packages' tests set it with Wire. The server takes it with Wired.
type Slot struct{ in *Inboxes }

// inboxSlot is promoted to the Deps that embed a Slot: it makes them
// Slotted, which no type of another package can be otherwise.
func (s *Slot) inboxSlot() *Slot { return s }

// Slotted is a pointer to Deps that embed a Slot (*a2a.Deps, *mcp.Deps),
// or to the Slot itself.
type Slotted interface{ inboxSlot() *Slot }

// Wire puts in in deps' Slot.
func Wire(deps Slotted, in *Inboxes) { deps.inboxSlot().in = in }

// Wired returns the Inboxes Wire put in deps' Slot, nil if none.
func Wired(deps Slotted) *Inboxes { return deps.inboxSlot().in }
