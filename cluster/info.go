package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/gateway"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/transport"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// clusterInfo is what the gateway learns of, and does to, the cluster (its
// gateway.ClusterInfo): the members of the router's view with their
// activation counts, every silo's activations and agent types, and
// deactivating an agent wherever it lives. What another silo knows is asked
// over the transport with runtime messages (peer.go answers them).
type clusterInfo struct {
	r  *router
	rt *grain.Runtime
	// declared marks the declared types in the listings (declared.go).
	declared *declaredTypes
}

// askPeers sends the runtime message msgType (with text) to every other
// silo of the view not marked unreachable, concurrently, and gives each
// reply to each, from the calling goroutine. Failures are joined, naming
// their silo. (A member marked unreachable drained its agents, and asking
// it would fail, or wait for ctx's end.)
func (c clusterInfo) askPeers(ctx context.Context, msgType, text string, each func(silo string, reply *agentsilov1.AgentMessage) error) error {
	return c.askSome(ctx, c.r.state.Load(), reachable, msgType, text, nil, each)
}

// reachable selects the members not marked unreachable.
func reachable(mi membership.Member) bool { return !mi.Unreachable }

// askPeersData is askPeers with data in the runtime message too.
func (c clusterInfo) askPeersData(ctx context.Context, msgType, text string, data []byte, each func(silo string, reply *agentsilov1.AgentMessage) error) error {
	return c.askSome(ctx, c.r.state.Load(), func(membership.Member) bool { return true }, msgType, text, data, each)
}

// askSome is askPeersData to the other silos of st's view that ask
// selects.
func (c clusterInfo) askSome(ctx context.Context, st *routeState, ask func(membership.Member) bool, msgType, text string, data []byte, each func(silo string, reply *agentsilov1.AgentMessage) error) error {
	r := c.r
	var peers []membership.Member
	for _, mi := range st.view.Members {
		if mi.Name != r.self && ask(mi) {
			peers = append(peers, mi)
		}
	}
	type answer struct {
		silo  string
		reply *agentsilov1.AgentMessage
		err   error
	}
	answers := make(chan answer, len(peers))
	for _, mi := range peers {
		go func() {
			reply, err := r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
				Message:     &agentsilov1.AgentMessage{MessageType: msgType, Message: text, Data: data, From: r.self},
				ViewVersion: st.view.Version,
			})
			answers <- answer{mi.Name, reply, err}
		}()
	}
	var errList []error
	for range peers {
		a := <-answers
		err := a.err
		if err == nil {
			err = each(a.silo, a.reply)
		}
		if err != nil {
			errList = append(errList, errs.New(codes.Unavailable, "silo %s: %w", a.silo, errs.FromStatus(err)))
		}
	}
	return errors.Join(errList...)
}

// clusterAgents lists the activations of every silo in the view.
func (c clusterInfo) clusterAgents(ctx context.Context, typeName string) ([]activationRecord, error) {
	out := activationInfos(c.rt.Activations(typeName))
	err := c.askPeers(ctx, msgAgents, typeName, func(_ string, reply *agentsilov1.AgentMessage) error {
		var recs []activationRecord
		if err := json.Unmarshal(reply.GetData(), &recs); err != nil {
			return err
		}
		out = append(out, recs...)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, err
}

// activationRecord is one activation as silos exchange it.
type activationRecord struct {
	Address      string    `json:"address"`
	Silo         string    `json:"silo"`
	ActivatedAt  time.Time `json:"activated_at"`
	LastActive   time.Time `json:"last_active"`
	MailboxDepth int       `json:"mailbox_depth"`
}

func activationInfos(as []grain.ActivationInfo) []activationRecord {
	out := make([]activationRecord, len(as))
	for i, a := range as {
		out[i] = activationRecord{
			Address:      a.Address.String(),
			Silo:         a.Silo,
			ActivatedAt:  a.ActivatedAt,
			LastActive:   a.LastActive,
			MailboxDepth: a.MailboxDepth,
		}
	}
	return out
}

// Members implements gateway.ClusterInfo: each member with its count of
// activations, as that silo reports it. A member marked unreachable is
// listed with its state and a count of 0, and not asked: a majority of
// the others could not reach its peer port, so asking would fail, or wait
// for ctx's end, and it takes no agents (a drained one runs none).
func (c clusterInfo) Members(ctx context.Context) ([]*agentsilov1.Member, int64, error) {
	r := c.r
	st := r.state.Load()
	counts := map[string]uint32{r.self: uint32(max(c.rt.Len(), 0))}
	err := c.askSome(ctx, st, reachable, msgCount, "", nil, func(silo string, reply *agentsilov1.AgentMessage) error {
		n, err := strconv.ParseUint(reply.GetMessage(), 10, 32)
		counts[silo] = uint32(n)
		return err
	})
	out := make([]*agentsilov1.Member, 0, len(st.view.Members))
	h := r.m.Health()
	for _, mi := range st.view.Members {
		out = append(out, &agentsilov1.Member{
			Name:        mi.Name,
			GatewayAddr: mi.GatewayAddr,
			PeerAddr:    mi.PeerAddr,
			State:       memberState(h, r.clk, mi, mi.Name == r.self),
			Self:        mi.Name == r.self,
			Activations: counts[mi.Name],
		})
	}
	return out, st.view.Version, err
}

// Agents implements gateway.ClusterInfo.
func (c clusterInfo) Agents(ctx context.Context, typeName string) ([]*agentsilov1.ActivationInfo, error) {
	recs, err := c.clusterAgents(ctx, typeName)
	out := make([]*agentsilov1.ActivationInfo, len(recs))
	for i, a := range recs {
		out[i] = &agentsilov1.ActivationInfo{
			Address:      a.Address,
			Silo:         a.Silo,
			ActivatedAt:  timestamppb.New(a.ActivatedAt),
			LastActive:   timestamppb.New(a.LastActive),
			MailboxDepth: uint32(max(a.MailboxDepth, 0)),
		}
	}
	return out, err
}

// Types implements gateway.ClusterInfo: the union of the silos' types; where
// two silos disagree about a type (a rolling upgrade), this silo's wins,
// then the first silo's by name.
func (c clusterInfo) Types(ctx context.Context) ([]*agentsilov1.AgentType, error) {
	bySilo := make(map[string][]*agentsilov1.AgentType)
	err := c.askPeers(ctx, msgTypes, "", func(silo string, reply *agentsilov1.AgentMessage) error {
		types, err := decodeTypes(reply)
		bySilo[silo] = types
		return err
	})
	return c.mergeTypes(bySilo), err
}

// decodeTypes reads a silo's answer to msgTypes.
func decodeTypes(reply *agentsilov1.AgentMessage) ([]*agentsilov1.AgentType, error) {
	var l agentsilov1.ListTypesResponse
	if err := proto.Unmarshal(reply.GetData(), &l); err != nil {
		return nil, err
	}
	return l.GetTypes(), nil
}

// mergeTypes is the union of this silo's types and the other silos'
// (bySilo), sorted by name: where two disagree about a type, this silo's
// wins, then the first silo's by name.
func (c clusterInfo) mergeTypes(bySilo map[string][]*agentsilov1.AgentType) []*agentsilov1.AgentType {
	byName := make(map[string]*agentsilov1.AgentType)
	for _, t := range c.rt.Registry().Types() {
		p := gateway.TypeProto(t)
		p.Declared = c.declared.declared(t.Name)
		byName[t.Name] = p
	}
	silos := make([]string, 0, len(bySilo))
	for silo := range bySilo {
		silos = append(silos, silo)
	}
	sort.Strings(silos)
	for _, silo := range silos {
		for _, t := range bySilo[silo] {
			if t.GetDeclared() && c.declared != nil {
				// Declared types are the same on every silo: one this
				// silo does not serve was deleted (and listed by a silo
				// before, the directory's cache of it older).
				continue
			}
			if _, ok := byName[t.GetName()]; !ok {
				byName[t.GetName()] = t
			}
		}
	}
	out := make([]*agentsilov1.AgentType, 0, len(byName))
	for _, t := range byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// peerTypes holds the types other silos listed, by incarnation, for the
// directory, which lists the cluster's types every few seconds
// (directoryTypes). A silo's types are those its program registered
// before it started: each incarnation is asked once, when it is in the
// view, and again typesRefresh after its last answer (for a program that
// registers a type while it runs); one gone from the view takes its types
// with it at once. Asking every other silo every time cost the cluster
// N(N-1) requests a period (4,000 a second at 100 silos), and kept every
// peer stream from ever going idle.
type peerTypes struct {
	mu sync.Mutex
	by map[incarnation]peerTypesAnswer
}

type peerTypesAnswer struct {
	at    time.Time
	types []*agentsilov1.AgentType
}

// typesRefresh is how long a silo's listed types are used before it is
// asked again.
const typesRefresh = 5 * time.Minute

// directoryTypes is Types for the directory: the types of the silos in
// the view, each other silo's from cache (peerTypes) while it is fresh.
// Where two silos disagree about a type, this silo's wins, then the first
// silo's by name.
func (c clusterInfo) directoryTypes(ctx context.Context, cache *peerTypes) ([]*agentsilov1.AgentType, error) {
	st := c.r.state.Load()
	now := c.r.clk.Now()
	cache.mu.Lock()
	if cache.by == nil {
		cache.by = make(map[incarnation]peerTypesAnswer)
	}
	lease := make(map[string]int64, len(st.view.Members))
	for _, mi := range st.view.Members {
		lease[mi.Name] = mi.LeaseID
	}
	for inc := range cache.by {
		if id, ok := lease[inc.name]; !ok || id != inc.lease {
			delete(cache.by, inc)
		}
	}
	stale := func(mi membership.Member) bool {
		a, ok := cache.by[incarnation{mi.Name, mi.LeaseID}]
		return !ok || now.Sub(a.at) >= typesRefresh
	}
	cache.mu.Unlock()
	err := c.askSome(ctx, st, func(mi membership.Member) bool {
		cache.mu.Lock()
		defer cache.mu.Unlock()
		return stale(mi)
	}, msgTypes, "", nil, func(silo string, reply *agentsilov1.AgentMessage) error {
		types, err := decodeTypes(reply)
		if err != nil {
			return err
		}
		cache.mu.Lock()
		cache.by[incarnation{silo, lease[silo]}] = peerTypesAnswer{at: now, types: types}
		cache.mu.Unlock()
		return nil
	})
	bySilo := make(map[string][]*agentsilov1.AgentType, len(lease))
	cache.mu.Lock()
	for name, id := range lease {
		bySilo[name] = cache.by[incarnation{name, id}].types
	}
	cache.mu.Unlock()
	return c.mergeTypes(bySilo), err
}

// deactivateNotActive is the reply to msgDeactivate from a silo on which
// the agent was not active; a silo that deactivated it replies nothing, as
// every silo did before it said.
const deactivateNotActive = "not active"

// Deactivate implements gateway.ClusterInfo: the silo that owns addr in this
// silo's view deactivates it (after catching up to this view), and says
// whether it was active. A silo that does not say (one older than the
// answer) is taken to have deactivated it.
func (c clusterInfo) Deactivate(ctx context.Context, addr string) (wasActive bool, err error) {
	r := c.r
	owner := r.Route(addr)
	a, err := grain.ParseAddress(addr)
	if err != nil {
		return false, err
	}
	if owner == "" {
		return c.rt.Deactivate(ctx, a)
	}
	st := r.state.Load()
	mi, ok := st.view.Member(owner)
	if !ok {
		return false, errs.New(codes.Unavailable, "deactivate %s: its silo %s is not in the view", addr, owner)
	}
	reply, err := r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
		Message:     &agentsilov1.AgentMessage{MessageType: msgDeactivate, To: addr, From: r.self},
		ViewVersion: st.view.Version,
	})
	if err != nil {
		return false, err
	}
	return reply.GetMessage() != deactivateNotActive, nil
}
