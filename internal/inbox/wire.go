package inbox

// The hooks by which a silo hands its inboxes to its A2A and MCP servers,
// whose Deps do not show them (users cannot make them: only the silo can
// put them in front of its runtime's session router). Packages a2a and
// mcp set their hook at init; the silo and their tests call it.
var (
	// WireA2A sets in on deps, an *a2a.Deps.
	WireA2A func(deps any, in *Inboxes)
	// WireMCP sets in on deps, an *mcp.Deps.
	WireMCP func(deps any, in *Inboxes)
)
