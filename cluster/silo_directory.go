package cluster

import (
	"context"
	"sync/atomic"

	"github.com/agentsilo/agentsilo/a2a"
	"github.com/agentsilo/agentsilo/directory"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/clock"
	"github.com/agentsilo/agentsilo/internal/gateway"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The silo's service directory (package directory): its outside entries
// in the silo's etcd, its types those of every silo (clusterInfo.Types),
// each outside entry refreshed by the silo that owns the address
// Directory:system:<entry> in the view, through the A2A server's outgoing
// transport (the SSRF guard unless --a2a-allow-private-networks). Agents
// reach it with Host.Directory, clients with the Directory service, A2A
// clients in the root card and /a2a, and the A2A agent type calls an
// entry by its name.

// directoryType is the type of the addresses that place outside entries
// on silos (never activated).
const directoryType = "Directory"

// newDirectory makes the silo's directory; info lists the cluster's types
// once the runtime is made.
func (s *Silo) newDirectory(info *clusterInfo) (*directory.Directory, error) {
	cfg := directory.DefaultConfig()
	cfg.Client, cfg.Prefix = s.etcd.Client(), s.etcd.Prefix()
	if s.cfg.DirectoryRefresh > 0 {
		cfg.Refresh = s.cfg.DirectoryRefresh
	}
	var cache peerTypes
	cfg.Types = func(ctx context.Context) ([]grain.TypeInfo, error) {
		if info.rt == nil {
			return nil, nil
		}
		types, err := info.directoryTypes(ctx, &cache)
		return typeInfos(types), err
	}
	cfg.Owns = func(name string) bool {
		return s.router.owns(grain.Address{Type: directoryType, Owner: directory.ACLOwner, Alias: name})
	}
	cfg.Transport = a2a.OutgoingTransport(s.cfg.A2A.AllowPrivateNetworks)
	clock.Wire(&cfg, s.clk)
	cfg.Logger = s.logger
	return directory.New(cfg)
}

// typeInfos is the TypeInfo of listed types: their skills with their
// schemas and Sensitive, which a model agent naming a type of another
// silo builds its tools of.
func typeInfos(types []*agentsilov1.AgentType) []grain.TypeInfo {
	out := make([]grain.TypeInfo, 0, len(types))
	for _, t := range types {
		out = append(out, gateway.TypeInfoOf(t))
	}
	return out
}

// Directory returns the silo's service directory (nil before Start).
func (s *Silo) Directory() *directory.Directory {
	if s.dir == nil {
		return nil
	}
	return s.dir.Load()
}

// dirRef is the silo's directory once made: the A2A and MCP agent types
// are registered (NewSilo) before it is (Start).
type dirRef struct {
	atomic.Pointer[directory.Directory]
}

// resolveA2A gives the A2A agent type an entry's card URL and headers,
// for A2A:owner:<entry> without a configuration of its own.
func (r *dirRef) resolveA2A(ctx context.Context, _, alias string) (string, map[string]string, bool, error) {
	return r.resolve(ctx, grain.KindA2A, alias)
}

// resolveMCP gives the MCP agent type an entry's endpoint and headers.
func (r *dirRef) resolveMCP(ctx context.Context, _, alias string) (string, map[string]string, bool, error) {
	return r.resolve(ctx, grain.KindMCP, alias)
}

// skillScopesA2A gives the A2A agent type the scopes an entry declares
// for a skill of it (its pinned skills', else its card's).
func (r *dirRef) skillScopesA2A(_ context.Context, _, alias, skill string) ([]string, bool) {
	return r.skillScopes(grain.KindA2A, alias, skill)
}

// skillScopesMCP gives the MCP agent type the scopes an entry declares
// for a tool of it (its pinned skills').
func (r *dirRef) skillScopesMCP(_ context.Context, _, alias, skill string) ([]string, bool) {
	return r.skillScopes(grain.KindMCP, alias, skill)
}

func (r *dirRef) skillScopes(kind, name, skill string) ([]string, bool) {
	d := r.Load()
	if d == nil {
		return nil, false
	}
	return d.SkillScopes(kind, name, skill)
}

func (r *dirRef) resolve(ctx context.Context, kind, name string) (string, map[string]string, bool, error) {
	d := r.Load()
	if d == nil {
		return "", nil, false, nil
	}
	return d.Resolve(ctx, kind, name)
}

// outsideAgents lists the directory's outside A2A agents for the A2A
// server's root card and /a2a.
func (r *dirRef) outsideAgents(ctx context.Context) []grain.DirectoryEntry {
	d := r.Load()
	if d == nil {
		return nil
	}
	l, _ := d.List(ctx, grain.DirectoryQuery{Kind: grain.KindA2A})
	return l
}
