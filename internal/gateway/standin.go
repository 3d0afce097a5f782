package gateway

import (
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/errs"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// StandIn answers on a gateway's port while no gateway serves there: a
// silo program keeps its gateway port open for its whole run, and between
// two silos (one fenced, the next not yet in the cluster) the stand-in
// takes the connections, so that clients are told why rather than
// refused. Every call, unary or stream, of every service fails with
// Unavailable and the message why returns then; the health service says
// NOT_SERVING. It speaks as the gateway does: the same TLS, the same
// authentication (a client without a valid credential gets
// Unauthenticated; the health service is open, as on the gateway), the
// same keepalives.
type StandIn struct {
	server *grpc.Server
}

// NewStandIn returns a stand-in for the gateway that cfg configures, which
// refuses calls with why(). It serves nothing until Serve.
func NewStandIn(cfg Config, why func() string) (*StandIn, error) {
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}
	refuse := func(any, grpc.ServerStream) error {
		return errs.New(codes.Unavailable, "%s (refused before it ran)", why())
	}
	srv := grpc.NewServer(append(authn.ServerOptions(), keepaliveParams, keepalivePolicy, grpc.UnknownServiceHandler(refuse))...)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.SetServingStatus(agentsilov1.Gateway_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	return &StandIn{server: srv}, nil
}

// Serve serves lis until GracefulStop or Stop, and returns nil then.
func (s *StandIn) Serve(lis net.Listener) error { return s.server.Serve(lis) }

// GracefulStop stops taking connections, tells the clients connected to
// go away (they connect again, to what serves the port then), and returns
// once the calls in flight, refused at once, have ended.
func (s *StandIn) GracefulStop() { s.server.GracefulStop() }
