package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// Directory is the service directory: the cluster's agent types, outside
// A2A agents and MCP servers, in one ranked search. Reach it with
// Client.Directory. Reading needs Read on system:directory; adding and
// removing outside entries needs Admin on it.
type Directory struct{ c *Client }

// Directory returns the client's service directory.
func (c *Client) Directory() Directory { return Directory{c} }

// directory prepares a call to the Directory service of the session's
// gateway.
func (c *Client) directory(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.DirectoryClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewDirectoryClient(c.conns[c.connIndex()])
}

// DirectoryQuery narrows a Search or a List.
type DirectoryQuery struct {
	// Kind keeps one kind: "type", "a2a" or "mcp".
	Kind string
	// Tag keeps entries with a skill of this tag (an MCP server: a tool of
	// this name).
	Tag string
}

// Search ranks the directory's entries of q's kind and tag by how well
// they match query (BM25), best first, each with its score and how to
// call it: at most Limit (0: 20, at most 1000). Options: Limit.
func (d Directory) Search(ctx context.Context, query string, q DirectoryQuery, opts ...CallOption) ([]DirectoryHit, error) {
	o, err := callOpts("search the directory", opts, optLimit)
	if err != nil {
		return nil, err
	}
	ctx, cancel, dc := d.c.directory(ctx)
	defer cancel()
	r, err := dc.Search(ctx, &agentsilov1.DirectorySearchRequest{Query: query, Kind: q.Kind, Tag: q.Tag, Limit: int32(min(o.limit, 1<<30))})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	hits := make([]DirectoryHit, len(r.GetHits()))
	for i, h := range r.GetHits() {
		hits[i] = DirectoryHit{Entry: directoryEntry(h.GetEntry()), Score: h.GetScore()}
	}
	return hits, nil
}

// List returns a page of the directory's entries of q's kind and tag, by
// kind and name: at most Limit (0: 500, at most 1000), After the cursor of
// the page before. Options: After, Limit.
func (d Directory) List(ctx context.Context, q DirectoryQuery, opts ...CallOption) (Page[DirectoryEntry], error) {
	o, err := callOpts("list the directory", opts, optAfter|optLimit)
	if err != nil {
		return Page[DirectoryEntry]{}, err
	}
	ctx, cancel, dc := d.c.directory(ctx)
	defer cancel()
	r, err := dc.List(ctx, &agentsilov1.DirectoryListRequest{Kind: q.Kind, Tag: q.Tag, After: o.after, Limit: int32(min(o.limit, 1<<30))})
	if err != nil {
		return Page[DirectoryEntry]{}, errs.FromStatus(err)
	}
	return Page[DirectoryEntry]{Items: directoryEntries(r.GetEntries()), Next: r.GetNext()}, nil
}

// Get returns one entry by name (or kind/name); NotFound if there is
// none.
func (d Directory) Get(ctx context.Context, name string) (DirectoryEntry, error) {
	ctx, cancel, dc := d.c.directory(ctx)
	defer cancel()
	r, err := dc.Get(ctx, &agentsilov1.DirectoryGetRequest{Name: name})
	if err != nil {
		return DirectoryEntry{}, errs.FromStatus(err)
	}
	return directoryEntry(r.GetEntry()), nil
}

// Add adds or replaces an outside entry: an A2A agent (kind "a2a", its
// base or card URL) or an MCP server ("mcp", its endpoint), with headers
// sent to it (credentials, never returned) and pinned skills. It returns
// the entry once listed.
func (d Directory) Add(ctx context.Context, e OutsideEntry) (DirectoryEntry, error) {
	ctx, cancel, dc := d.c.directory(ctx)
	defer cancel()
	r, err := dc.Add(ctx, &agentsilov1.DirectoryAddRequest{Name: e.Name, Kind: e.Kind, Url: e.URL, Description: e.Description,
		Headers: e.Headers, Skills: skillsToWire(e.Skills), Trust: e.Trust, ApprovedSkills: e.ApprovedSkills, Principal: e.Principal})
	if err != nil {
		return DirectoryEntry{}, errs.FromStatus(err)
	}
	return directoryEntry(r.GetEntry()), nil
}

// Remove removes an outside entry; NotFound if there is none.
func (d Directory) Remove(ctx context.Context, name string) error {
	ctx, cancel, dc := d.c.directory(ctx)
	defer cancel()
	_, err := dc.Remove(ctx, &agentsilov1.DirectoryRemoveRequest{Name: name})
	return errs.FromStatus(err)
}
