package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsilo/agentsilo/cluster/membership"
	"github.com/agentsilo/agentsilo/cluster/transport"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// clusterAgents lists the activations of every silo in the view.
// clusterInfo is what the gateway learns of the cluster (its ClusterInfo):
// the members of the router's view and the activations of every silo.
type clusterInfo struct {
	r  *router
	rt *grain.Runtime
}

func (c clusterInfo) clusterAgents(ctx context.Context, typeName string) ([]ActivationRecord, error) {
	r := c.r
	st := r.state.Load()
	out := activationInfos(c.rt.Activations(typeName))
	type part struct {
		recs []ActivationRecord
		err  error
	}
	var peers []membership.Member
	for _, mi := range st.view.Members {
		if mi.Name != r.self {
			peers = append(peers, mi)
		}
	}
	parts := make(chan part, len(peers))
	for _, mi := range peers {
		go func() {
			reply, err := r.tp.Ask(ctx, mi.PeerAddr, &transport.Envelope{
				Message:     &agentsilov1.AgentMessage{MessageType: msgAgents, Message: typeName, From: r.self},
				ViewVersion: st.view.Version,
			})
			var recs []ActivationRecord
			if err == nil {
				err = json.Unmarshal(reply.GetData(), &recs)
			}
			if err != nil {
				err = errs.New(codes.Unavailable, "agents of silo %s: %v", mi.Name, errs.FromStatus(err))
			}
			parts <- part{recs, err}
		}()
	}
	var errList []error
	for range peers {
		p := <-parts
		out = append(out, p.recs...)
		if p.err != nil {
			errList = append(errList, p.err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, errors.Join(errList...)
}

// ActivationRecord is one activation as silos exchange it.
type ActivationRecord struct {
	Address      string    `json:"address"`
	Silo         string    `json:"silo"`
	ActivatedAt  time.Time `json:"activated_at"`
	LastActive   time.Time `json:"last_active"`
	MailboxDepth int       `json:"mailbox_depth"`
}

func activationInfos(as []grain.ActivationInfo) []ActivationRecord {
	out := make([]ActivationRecord, len(as))
	for i, a := range as {
		out[i] = ActivationRecord{
			Address:      a.Address.String(),
			Silo:         a.Silo,
			ActivatedAt:  a.ActivatedAt,
			LastActive:   a.LastActive,
			MailboxDepth: a.MailboxDepth,
		}
	}
	return out
}

// Members implements gateway.ClusterInfo.
func (c clusterInfo) Members() ([]*agentsilov1.Member, int64) {
	r := c.r
	st := r.state.Load()
	out := make([]*agentsilov1.Member, 0, len(st.view.Members))
	for _, mi := range st.view.Members {
		m := &agentsilov1.Member{
			Name:        mi.Name,
			GatewayAddr: mi.GatewayAddr,
			PeerAddr:    mi.PeerAddr,
			State:       "alive",
			Self:        mi.Name == r.self,
		}
		if mi.Leaving {
			m.State = "leaving"
		}
		if m.Self {
			m.Activations = uint32(max(c.rt.Len(), 0))
		}
		out = append(out, m)
	}
	return out, st.view.Version
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
