package gateway

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// directoryServer is the Directory service (agentsilov1.Directory) of a
// gateway: reading needs Read on system:directory, adding and removing
// Admin on it (see directory.Authorize).
type directoryServer struct {
	agentsilov1.UnimplementedDirectoryServer
	g   *Gateway
	dir *directory.Directory
}

// ServeDirectory serves the Directory service of d beside the Gateway
// service. Call it before Serve.
func (g *Gateway) ServeDirectory(d *directory.Directory) {
	agentsilov1.RegisterDirectoryServer(g.server, directoryServer{g: g, dir: d})
}

func (ds directoryServer) check(ctx context.Context, need acl.Permission) error {
	c, err := unaryCaller(ctx)
	if err != nil {
		return err
	}
	return directory.Authorize(ds.g.cfg.ACL, c, need)
}

// Search implements agentsilov1.DirectoryServer.
func (ds directoryServer) Search(ctx context.Context, req *agentsilov1.DirectorySearchRequest) (*agentsilov1.DirectorySearchResponse, error) {
	if err := ds.check(ctx, acl.Read); err != nil {
		return nil, err
	}
	hits, err := ds.dir.Search(ctx, grain.DirectoryQuery{Text: req.GetQuery(), Kind: req.GetKind(), Tag: req.GetTag(), Limit: int(req.GetLimit())})
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.DirectorySearchResponse{Hits: make([]*agentsilov1.DirectoryHit, len(hits))}
	for i, h := range hits {
		out.Hits[i] = &agentsilov1.DirectoryHit{Entry: directory.EntryProto(h.Entry), Score: h.Score}
	}
	return out, nil
}

// List implements agentsilov1.DirectoryServer.
func (ds directoryServer) List(ctx context.Context, req *agentsilov1.DirectoryListRequest) (*agentsilov1.DirectoryListResponse, error) {
	if err := ds.check(ctx, acl.Read); err != nil {
		return nil, err
	}
	entries, next, err := ds.dir.ListPage(ctx, grain.DirectoryQuery{Kind: req.GetKind(), Tag: req.GetTag()}, req.GetAfter(), int(req.GetLimit()))
	if err != nil {
		return nil, err
	}
	out := &agentsilov1.DirectoryListResponse{Entries: make([]*agentsilov1.DirectoryEntry, len(entries)), Next: next}
	for i, e := range entries {
		out.Entries[i] = directory.EntryProto(e)
	}
	return out, nil
}

// Get implements agentsilov1.DirectoryServer.
func (ds directoryServer) Get(ctx context.Context, req *agentsilov1.DirectoryGetRequest) (*agentsilov1.DirectoryGetResponse, error) {
	if err := ds.check(ctx, acl.Read); err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, errs.New(codes.InvalidArgument, "directory: Get: no name")
	}
	e, err := ds.dir.Get(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &agentsilov1.DirectoryGetResponse{Entry: directory.EntryProto(e)}, nil
}

// Add implements agentsilov1.DirectoryServer.
func (ds directoryServer) Add(ctx context.Context, req *agentsilov1.DirectoryAddRequest) (*agentsilov1.DirectoryAddResponse, error) {
	if err := ds.check(ctx, acl.Admin); err != nil {
		return nil, err
	}
	e, err := ds.dir.Add(ctx, directory.SpecFromProto(req))
	if err != nil {
		return nil, err
	}
	return &agentsilov1.DirectoryAddResponse{Entry: directory.EntryProto(e)}, nil
}

// Remove implements agentsilov1.DirectoryServer.
func (ds directoryServer) Remove(ctx context.Context, req *agentsilov1.DirectoryRemoveRequest) (*agentsilov1.DirectoryRemoveResponse, error) {
	if err := ds.check(ctx, acl.Admin); err != nil {
		return nil, err
	}
	if err := ds.dir.Remove(ctx, req.GetName()); err != nil {
		return nil, err
	}
	return &agentsilov1.DirectoryRemoveResponse{}, nil
}
