package gateway

import "github.com/agentsilo/agentsilo/auth"

// ServeInProcess serves the gateway's calls on l, whose connections come
// from the silo's own code (the dashboard) and never leave the process:
// on them a call may act as a principal the silo vouches for (auth.Vouch),
// which the ACL then checks as that principal's own calls. It returns when
// the gateway stops (nil), or if l fails.
func (g *Gateway) ServeInProcess(l *auth.InProcess) error { return g.server.Serve(l) }
