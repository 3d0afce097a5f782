// Package outbound is the HTTP client side of what a silo calls outside the
// cluster on an agent's or a client's behalf: outside A2A agents, MCP
// servers, the service directory's entries. Such a URL comes from a caller,
// so by default the silo's own network is out of its reach (server-side
// request forgery): Transport checks every connection where it is made,
// after name resolution, so that neither a URL nor a redirect nor a DNS
// answer reaches an internal address.
package outbound

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// ErrBlocked is the error of a connection the guard refused.
var ErrBlocked = errors.New("the address is loopback, private, link-local or otherwise internal, which the silo's calls out of the cluster may not reach (the silo flag --a2a-allow-private-networks allows it for A2A and the service directory, --mcp-allow-private-networks for MCP agents, --llm-allow-private-networks for the model calls of declared types; in a program, AllowPrivateNetworks in their options)")

// Blocked reports whether ip is an address the silo's outgoing calls may
// not reach: what would let a caller probe the silo's own network.
func Blocked(ip net.IP) bool {
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() ||
		// 100.64.0.0/10 (carrier-grade NAT) is as internal as 10/8.
		ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64
}

// Transport returns the HTTP transport of outgoing calls: unless
// allowPrivate, a connection to an address Blocked reports fails with
// ErrBlocked. It uses no proxy (a proxy would dial past the guard).
func Transport(allowPrivate bool) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || Blocked(ip) {
				return fmt.Errorf("%s: %w", host, ErrBlocked)
			}
			return nil
		}
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Headers adds Header to every request it passes to Base (an outside
// service's credentials).
type Headers struct {
	Base   http.RoundTripper
	Header http.Header
}

// RoundTrip implements http.RoundTripper.
func (t *Headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.Header) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.Header {
			r.Header[k] = v
		}
	}
	return t.Base.RoundTrip(r)
}

// LimitBody bounds the bodies of the responses Base returns to Max bytes.
type LimitBody struct {
	Base http.RoundTripper
	Max  int64
}

// RoundTrip implements http.RoundTripper.
func (t *LimitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.Base.RoundTrip(r)
	if err == nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, t.Max), resp.Body}
	}
	return resp, err
}
