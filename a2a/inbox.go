package a2a

import (
	"github.com/agentsilo/agentsilo/internal/inbox"
)

// The silo's inboxes (internal/inbox) are the runtime's session router on a
// silo that serves A2A (or MCP): a message to an A2A turn's sender address,
// Session:<principal>:a2a-<id>@<silo> (what an agent pushes to m.From
// during the turn), goes to that turn, and every other session message to
// the next router, the gateway's sessions. They are made before the
// runtime and handed to the Server in its Deps (inbox.Wire).

// IsInbox reports whether addr is an A2A turn's sender address.
func IsInbox(addr string) bool { return inbox.IsKind(addr, inbox.A2A) }
