package a2a

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// errBlockedAddress is the error of a connection the SSRF guard refused.
var errBlockedAddress = errors.New("the address is loopback, private, link-local or otherwise internal, which A2A calls out of the silo may not reach (--a2a-allow-private-networks allows it)")

// blockedIP reports whether ip is an address the silo's outgoing A2A
// calls may not reach: what would let a caller probe the silo's own
// network (server-side request forgery).
func blockedIP(ip net.IP) bool {
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() ||
		// 100.64.0.0/10 (carrier-grade NAT) is as internal as 10/8.
		ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64
}

// outgoingTransport is the HTTP transport of the A2A agent type's calls:
// unless allowPrivate, every connection is checked where it is made, after
// name resolution, so that neither a URL nor a redirect nor a DNS answer
// can reach an internal address.
func outgoingTransport(allowPrivate bool) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip := net.ParseIP(host)
			if ip == nil || blockedIP(ip) {
				return fmt.Errorf("%s: %w", host, errBlockedAddress)
			}
			return nil
		}
	}
	return &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the guard
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// headerTransport adds headers to every request (an agent's credentials).
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// limitTransport bounds the bodies of responses (agent cards).
type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t *limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, t.max), resp.Body}
	}
	return resp, err
}
