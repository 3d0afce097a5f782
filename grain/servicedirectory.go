package grain

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// The service directory: one searchable list of what an agent can call —
// the cluster's agent types, outside A2A agents and MCP servers (package
// directory keeps it; Config.Directory hands it to the runtime). An agent
// reaches it with Host.Directory.

// The kinds of directory entries.
const (
	// KindType is an agent type of the cluster: its agents are
	// Type:owner:alias.
	KindType = "type"
	// KindA2A is an outside A2A agent, called as A2A:owner:<entry>.
	KindA2A = "a2a"
	// KindMCP is an outside MCP server, its tools called through
	// MCP:owner:<entry>.
	KindMCP = "mcp"
)

// DirectoryEntry is one thing the directory knows: an agent type, an
// outside A2A agent or an MCP server. Credentials stored with an outside
// entry are never part of it.
type DirectoryEntry struct {
	// Name is the type's name, or the outside entry's name (an alias).
	Name string
	// Kind is KindType, KindA2A or KindMCP.
	Kind string
	// Description says what it does (an outside agent's card's, unless the
	// entry gives its own).
	Description string
	// URL is where an outside entry is: the A2A agent's base or card URL,
	// the MCP server's endpoint. Empty for a type.
	URL string
	// Skills are what the type or A2A agent can do: the card's skills and
	// the pinned ones.
	Skills []Skill
	// Tools are an MCP server's tools.
	Tools []DirectoryTool
	// Call says how to call it: an address pattern (Planner:{owner}:{alias},
	// A2A:{owner}:weather, MCP:{owner}:files).
	Call string
	// LastSeen is when the outside entry last answered a refresh (zero:
	// never). LastError is the last refresh's error, "" after a success.
	LastSeen  time.Time
	LastError string
	// Trust, for an outside A2A agent, is its level: TrustObserve (every
	// call a model agent makes to it waits for a person's approval, and
	// its own requests to the cluster's agents are refused) or TrustAct
	// (the default: its ApprovedSkills run without approval, any other
	// call waits; its requests pass the ACL as any principal's).
	Trust string
	// ApprovedSkills are, at TrustAct, the skills a model agent's call may
	// name to run without approval (empty: every call runs).
	ApprovedSkills []string
	// Principal is the principal the outside agent calls the cluster as
	// (its API key's or token's), to whom its level applies.
	Principal string
}

// The trust levels of an outside A2A agent (DirectoryEntry.Trust).
const (
	TrustObserve = "observe"
	TrustAct     = "act"
)

// DirectoryTool is a tool of an MCP server.
type DirectoryTool struct {
	Name        string
	Description string
}

// DirectoryQuery asks the directory for entries. Every field is optional.
type DirectoryQuery struct {
	// Text is the words to search for; empty matches every entry.
	Text string
	// Kind keeps entries of one kind (KindType, KindA2A, KindMCP).
	Kind string
	// Tag keeps entries having a skill with this tag (or, for MCP servers,
	// a tool of this name), compared without regard to case.
	Tag string
	// Limit bounds the results. 0: 20.
	Limit int
}

// DirectoryHit is a search result: an entry and its score (higher is a
// better match).
type DirectoryHit struct {
	Entry DirectoryEntry
	Score float64
}

// Directory is an agent's view of the service directory (Host.Directory).
// Its methods may be called from any goroutine; what they return is the
// caller's to keep. Reading needs Read on system:directory for the turn's
// principal (PermissionDenied otherwise).
type Directory interface {
	// Search ranks the entries matching q by how well they match its text.
	Search(ctx context.Context, q DirectoryQuery) ([]DirectoryHit, error)
	// List returns the entries of q's kind and tag, by kind and name (its
	// text is ignored).
	List(ctx context.Context, q DirectoryQuery) ([]DirectoryEntry, error)
	// Get returns one entry by name ("kind/name" picks one of a kind);
	// NotFound if there is none.
	Get(ctx context.Context, name string) (DirectoryEntry, error)
}

// DirectoryService is what the runtime hands agents' directory calls to
// (Config.Directory), with the principal each call is on behalf of.
// Its methods are called concurrently.
type DirectoryService interface {
	Search(ctx context.Context, principal string, q DirectoryQuery) ([]DirectoryHit, error)
	List(ctx context.Context, principal string, q DirectoryQuery) ([]DirectoryEntry, error)
	Get(ctx context.Context, principal, name string) (DirectoryEntry, error)
}

// Directory implements Host.
func (a *activation) Directory() Directory { return actDirectory{a} }

// actDirectory is an activation's Directory: each call on behalf of the
// principal of the turn it is made from.
type actDirectory struct{ a *activation }

func (d actDirectory) service() (DirectoryService, error) {
	if s := d.a.rt.cfg.Directory; s != nil {
		return s, nil
	}
	return nil, errs.New(codes.Unavailable, "no service directory on silo %s", d.a.rt.cfg.Silo)
}

func (d actDirectory) Search(ctx context.Context, q DirectoryQuery) ([]DirectoryHit, error) {
	s, err := d.service()
	if err != nil {
		return nil, err
	}
	return s.Search(ctx, d.a.principal(ctx), q)
}

func (d actDirectory) List(ctx context.Context, q DirectoryQuery) ([]DirectoryEntry, error) {
	s, err := d.service()
	if err != nil {
		return nil, err
	}
	return s.List(ctx, d.a.principal(ctx), q)
}

func (d actDirectory) Get(ctx context.Context, name string) (DirectoryEntry, error) {
	s, err := d.service()
	if err != nil {
		return DirectoryEntry{}, err
	}
	return s.Get(ctx, d.a.principal(ctx), name)
}
