package a2a

import (
	"github.com/agentsilo/agentsilo/internal/inbox"
	"github.com/agentsilo/agentsilo/internal/siloapi"
)

// Inboxes is the runtime's siloapi.SessionRouter on a silo that serves A2A
// (or MCP): a message to an A2A turn's sender address,
// Session:<principal>:a2a-<id>@<silo> (what an agent pushes to m.From
// during the turn), goes to that turn, and every other session message to
// the next router, the gateway's sessions. It is made before the runtime
// and handed to the Server.
type Inboxes = inbox.Inboxes

// NewInboxes returns the inboxes of silo, in front of next.
func NewInboxes(silo string, next siloapi.SessionRouter) *Inboxes { return inbox.New(silo, next) }

// IsInbox reports whether addr is an A2A turn's sender address.
func IsInbox(addr string) bool { return inbox.IsKind(addr, inbox.A2A) }
