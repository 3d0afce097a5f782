// Package directory is the service directory: one searchable list of what
// can be called from the cluster — its agent types (every silo's, as they
// come and go), outside A2A agents and outside MCP servers. Outside entries
// are added by URL and kept in etcd (with optional headers: credentials
// that are never returned to readers nor logged, and optional pinned
// skills); one silo, the entry's owner in the membership view, fetches each
// again every Refresh (an A2A agent's card from
// {url}/.well-known/agent-card.json, an MCP server's tools) and stores what
// it found, or its error, for all silos to see. An entry that does not
// answer stays listed, with its last error and the time it was last seen.
//
// Search ranks entries by BM25 (bm25.go) over their names, descriptions,
// skills, tags, examples and tools; every silo keeps the index in memory
// and rebuilds it after changes.
//
//	dir, err := directory.New(directory.Config{Client: etcd, Prefix: "/agentsilo/", Types: types})
//	err = dir.Start(ctx)
//	defer dir.Close()
//	_, err = dir.Add(ctx, directory.Spec{Name: "weather", Kind: grain.KindA2A, URL: "https://weather.example.com"})
//	hits, err := dir.Search(ctx, grain.DirectoryQuery{Text: "forecast for a city"})
//
// The silo serves it to agents (grain.Host.Directory), clients (the
// Directory gRPC service), A2A (the root card and /a2a) and MCP (tools);
// the A2A and MCP agent types call an entry by its name
// (A2A:{owner}:<entry>, MCP:{owner}:<entry>) with its URL and headers
// (Resolve). Access: Read on system:directory to read, Admin to change
// (see Authorize).
package directory
