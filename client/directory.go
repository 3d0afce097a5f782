package client

import (
	"context"

	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The service directory: the cluster's agent types, outside A2A agents and
// MCP servers, in one ranked search. Reading needs Read on
// system:directory; adding and removing outside entries needs Admin on it.

// directory prepares a call to the Directory service of the session's
// gateway.
func (c *Client) directory(ctx context.Context) (context.Context, context.CancelFunc, agentsilov1.DirectoryClient) {
	ctx, cancel, _ := c.unary(ctx)
	return ctx, cancel, agentsilov1.NewDirectoryClient(c.conns[c.connIndex()])
}

// DirectoryQuery narrows a Search or a ListDirectory.
type DirectoryQuery struct {
	// Kind keeps one kind: "type", "a2a" or "mcp".
	Kind string
	// Tag keeps entries with a skill of this tag (an MCP server: a tool of
	// this name).
	Tag string
	// Limit bounds the hits of a search: 0 is 20, at most 1000.
	Limit int
}

// Search ranks the directory's entries by how well they match query
// (BM25), best first, each with its score and how to call it.
func (c *Client) Search(ctx context.Context, query string, q DirectoryQuery) ([]DirectoryHit, error) {
	ctx, cancel, dc := c.directory(ctx)
	defer cancel()
	r, err := dc.Search(ctx, &agentsilov1.DirectorySearchRequest{Query: query, Kind: q.Kind, Tag: q.Tag, Limit: int32(q.Limit)})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	hits := make([]DirectoryHit, len(r.GetHits()))
	for i, h := range r.GetHits() {
		hits[i] = DirectoryHit{Entry: directoryEntry(h.GetEntry()), Score: h.GetScore()}
	}
	return hits, nil
}

// ListDirectory returns the directory's entries of q's kind and tag, by
// kind and name, all of them (a page of 500 at a time).
func (c *Client) ListDirectory(ctx context.Context, q DirectoryQuery) ([]DirectoryEntry, error) {
	var out []DirectoryEntry
	after := ""
	for {
		page, next, err := c.ListDirectoryPage(ctx, q, after, 0)
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		after = next
	}
}

// ListDirectoryPage returns at most limit entries (0: 500, at most 1000)
// of q's kind and tag after the entry named after (kind/name; "": from the
// first), and the after of the next page ("" if there is none).
func (c *Client) ListDirectoryPage(ctx context.Context, q DirectoryQuery, after string, limit int) ([]DirectoryEntry, string, error) {
	ctx, cancel, dc := c.directory(ctx)
	defer cancel()
	r, err := dc.List(ctx, &agentsilov1.DirectoryListRequest{Kind: q.Kind, Tag: q.Tag, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, "", errs.FromStatus(err)
	}
	return directoryEntries(r.GetEntries()), r.GetNext(), nil
}

// DirectoryEntry returns one entry by name (or kind/name); NotFound if
// there is none.
func (c *Client) DirectoryEntry(ctx context.Context, name string) (DirectoryEntry, error) {
	ctx, cancel, dc := c.directory(ctx)
	defer cancel()
	r, err := dc.Get(ctx, &agentsilov1.DirectoryGetRequest{Name: name})
	if err != nil {
		return DirectoryEntry{}, errs.FromStatus(err)
	}
	return directoryEntry(r.GetEntry()), nil
}

// AddToDirectory adds or replaces an outside entry: an A2A agent (kind
// "a2a", its base or card URL) or an MCP server ("mcp", its endpoint),
// with headers sent to it (credentials, never returned) and pinned skills.
// It returns the entry once listed.
func (c *Client) AddToDirectory(ctx context.Context, e OutsideEntry) (DirectoryEntry, error) {
	ctx, cancel, dc := c.directory(ctx)
	defer cancel()
	r, err := dc.Add(ctx, &agentsilov1.DirectoryAddRequest{Name: e.Name, Kind: e.Kind, Url: e.URL, Description: e.Description,
		Headers: e.Headers, Skills: skillsToWire(e.Skills)})
	if err != nil {
		return DirectoryEntry{}, errs.FromStatus(err)
	}
	return directoryEntry(r.GetEntry()), nil
}

// RemoveFromDirectory removes an outside entry; NotFound if there is none.
func (c *Client) RemoveFromDirectory(ctx context.Context, name string) error {
	ctx, cancel, dc := c.directory(ctx)
	defer cancel()
	_, err := dc.Remove(ctx, &agentsilov1.DirectoryRemoveRequest{Name: name})
	return errs.FromStatus(err)
}
