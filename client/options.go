package client

import (
	"crypto/tls"
	"time"

	"github.com/agentsilo/agentsilo/internal/protocol"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
)

// An Option configures a Client at Dial.
type Option interface {
	apply(*options)
}

type options struct {
	principal string
	apiKey    string
	tokens    oauth2.TokenSource
	tls       *tls.Config
	timeout   time.Duration
	maxSize   int
	onMessage func(*Message)
	dialOpts  []grpc.DialOption

	tracerProvider trace.TracerProvider
}

func defaultOptions() options {
	return options{
		timeout: 30 * time.Second,
		maxSize: protocol.DefaultMaxMessageSize,
	}
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithPrincipal declares who the client is, for a gateway that accepts
// self-declared principals (a development silo on loopback); such a
// gateway's default is "dev". A gateway that authenticates its clients (API
// key, client certificate) refuses a declared principal other than the one
// it proved. Default: none declared.
func WithPrincipal(p string) Option {
	return optionFunc(func(o *options) { o.principal = p })
}

// WithAPIKey sends key as the `x-api-key` metadata of every call, for a
// gateway that authenticates API keys.
func WithAPIKey(key string) Option {
	return optionFunc(func(o *options) { o.apiKey = key })
}

// WithTLS connects with TLS (and a client certificate, if cfg has one).
// Default: plaintext.
func WithTLS(cfg *tls.Config) Option {
	return optionFunc(func(o *options) { o.tls = cfg })
}

// WithTimeout bounds every call whose context has no deadline: an Ask's
// wait for its reply, a Send's wait for the gateway to accept it. Default:
// 30 s.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.timeout = d })
}

// WithMaxMessageSize is the largest message, encoded, that the client sends
// or receives; a larger one is ResourceExhausted before anything is sent.
// It should match the silo's limit. Default: 4 MiB.
func WithMaxMessageSize(n int) Option {
	return optionFunc(func(o *options) { o.maxSize = n })
}

// WithOnMessage has f called with every message pushed to the session,
// instead of delivering them on Messages. f is called on one goroutine, in
// order; while it runs, the session reads nothing else (replies included),
// so it must return quickly and must not call the Client.
func WithOnMessage(f func(*Message)) Option {
	return optionFunc(func(o *options) { o.onMessage = f })
}

// WithDialOptions adds gRPC dial options, after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return optionFunc(func(o *options) { o.dialOpts = append(o.dialOpts, opts...) })
}
