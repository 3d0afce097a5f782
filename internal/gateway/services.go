package gateway

import "google.golang.org/grpc"

// RegisterService serves another gRPC service on the gateway's port beside
// the Gateway service, behind the gateway's authentication and per-client
// limits: a handler finds its caller with acl.CallerFrom, or, on a gateway
// without authentication, auth.DeclaredPrincipal. Call it before Serve.
func (g *Gateway) RegisterService(desc *grpc.ServiceDesc, impl any) {
	g.server.RegisterService(desc, impl)
}
