package cluster

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/cluster/transport"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/grain/errs"
)

// sessionSilo returns the silo named in a session address's id
// (`Session:owner:<uuid>@<silo>`), or "" if it names none.
func sessionSilo(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	id := addr[i+1:]
	if j := strings.IndexByte(id, '@'); j >= 0 {
		return id[j+1:]
	}
	return ""
}

// sessionRouter delivers messages for client sessions: to the local gateway,
// or through the transport to the silo whose gateway holds the session.
type sessionRouter struct {
	r     *router
	local grain.SessionRouter
}

func (s sessionRouter) DeliverToSession(ctx context.Context, msg *grain.Message) error {
	silo := sessionSilo(msg.To)
	if silo == "" || silo == s.r.self {
		return s.local.DeliverToSession(ctx, msg)
	}
	mi, ok := s.r.state.Load().view.Member(silo)
	if !ok {
		return errs.New(codes.NotFound, "no client session %s: its silo %s is not in the cluster", msg.To, silo)
	}
	return s.r.tp.Send(ctx, mi.PeerAddr, &transport.Envelope{Kind: msg.Kind, Message: msg, Hops: 1})
}
