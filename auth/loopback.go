package auth

import (
	"net"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Loopback reports whether addr (host:port) is a loopback address:
// "localhost" or a loopback IP. It is the one check every port of a silo
// makes before serving without authentication or TLS.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckLoopback returns nil if addr is a loopback address, or else an
// InvalidArgument error saying that server (e.g. "gateway", "a2a"), which
// takes self-declared principals, serves only loopback unless --insecure.
func CheckLoopback(server, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return errs.New(codes.InvalidArgument, "%s: address %q: %w", server, addr, err)
	}
	if Loopback(addr) {
		return nil
	}
	return errs.New(codes.InvalidArgument, "%s: address %q is not loopback: without authentication callers declare their principal, so it serves only loopback unless Insecure (--insecure) is set", server, addr)
}
