package llm

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsilo/agentsilo/audit"
	"github.com/agentsilo/agentsilo/internal/clock"
)

// Option changes how Register (or NewProvider) builds a model agent type.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	provider       Provider
	httpClient     *http.Client
	maxRetries     int
	getenv         func(string) (string, bool)
	stream         bool
	clk            Clock
	maxToolResult  int
	repeatLimit    int
	resumeDue      time.Duration
	resumePeriod   time.Duration
	maxRecordBytes int
	tracer         trace.TracerProvider
	metrics        *Metrics   // see WithMetrics (metrics.go)
	audit          *audit.Log // see WithAudit (audit.go)
	auditSet       bool
}

// Defaults of the options.
const (
	// DefaultMaxToolResultBytes bounds what a tool call gives back to the
	// model; a longer result is cut, saying so.
	DefaultMaxToolResultBytes = 16 << 10
	// DefaultRepeatLimit is how many times a turn may make the same tool
	// call (name and arguments) before the loop guard ends it.
	DefaultRepeatLimit = 3
	// DefaultResumeAfter is when the resume reminder, registered with a
	// turn's first saved step, first fires (then every
	// DefaultResumePeriod): it activates the agent again after a crash,
	// and the turn resumes.
	DefaultResumeAfter  = time.Minute
	DefaultResumePeriod = time.Minute
	// DefaultMaxRecordBytes bounds the agent's recorded conversation: at a
	// turn's end, the oldest turns are dropped until it fits.
	DefaultMaxRecordBytes = 512 << 10
)

func newOptions(opts []Option) *options {
	o := &options{
		maxRetries:     DefaultMaxRetries,
		clk:            clock.Real{},
		maxToolResult:  DefaultMaxToolResultBytes,
		repeatLimit:    DefaultRepeatLimit,
		resumeDue:      DefaultResumeAfter,
		resumePeriod:   DefaultResumePeriod,
		maxRecordBytes: DefaultMaxRecordBytes,
	}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(o)
		}
	}
	return o
}

// WithProvider makes the agents use p instead of the provider their
// definition's model names (for a provider of one's own).
func WithProvider(p Provider) Option { return optionFunc(func(o *options) { o.provider = p }) }

// WithHTTPClient makes the provider's SDK send its requests with c. The
// activations of a type share it: give its transport room for an idle
// connection per conversation calling the model at once
// (http.Transport.MaxIdleConnsPerHost, whose default of 2 has most calls
// open a connection of their own). Without it, a provider keeps up to
// 1,024 idle connections to its model's host.
func WithHTTPClient(c *http.Client) Option {
	return optionFunc(func(o *options) { o.httpClient = c })
}

// WithMaxRetries sets how many times the SDK retries a model call that
// failed with 429, 408, 409, 5xx or a broken connection (default
// DefaultMaxRetries; 0: never), honouring Retry-After.
func WithMaxRetries(n int) Option {
	return optionFunc(func(o *options) { o.maxRetries = max(n, 0) })
}

// WithGetenv reads the API key's environment variable with getenv
// instead of os.LookupEnv.
func WithGetenv(getenv func(string) (string, bool)) Option {
	return optionFunc(func(o *options) { o.getenv = getenv })
}

// WithStreaming makes model calls stream their response, pushing its text
// to the caller as it comes (one-way messages of type ProgressDelta to a
// client session) while the turn runs.
func WithStreaming(on bool) Option { return optionFunc(func(o *options) { o.stream = on }) }

// Clock is what the agents read the time from (turn start times and
// deadlines): time.Now by default.
type Clock interface{ Now() time.Time }

// WithClock gives the agents a clock (a fake one in tests).
func WithClock(c Clock) Option { return optionFunc(func(o *options) { o.clk = c }) }

// WithMaxToolResultBytes bounds what a tool call gives back to the model
// (default DefaultMaxToolResultBytes).
func WithMaxToolResultBytes(n int) Option {
	return optionFunc(func(o *options) {
		if n > 0 {
			o.maxToolResult = n
		}
	})
}

// WithRepeatLimit sets how many times a turn may make the same tool call
// before the loop guard ends it (default DefaultRepeatLimit).
func WithRepeatLimit(n int) Option {
	return optionFunc(func(o *options) {
		if n > 0 {
			o.repeatLimit = n
		}
	})
}

// WithResumeReminder sets when the resume reminder (ResumeReminder),
// registered with a turn's first saved step, first fires (due) and then
// how often (period, at least the silo's
// minimum reminder period). A negative due registers no reminder: an
// interrupted turn then resumes only when its caller retries.
func WithResumeReminder(due, period time.Duration) Option {
	return optionFunc(func(o *options) { o.resumeDue, o.resumePeriod = due, period })
}

// WithMaxRecordBytes bounds the recorded conversation (default
// DefaultMaxRecordBytes).
func WithMaxRecordBytes(n int) Option {
	return optionFunc(func(o *options) {
		if n > 0 {
			o.maxRecordBytes = n
		}
	})
}

// WithTracerProvider makes the model and tool spans with tp (default:
// OpenTelemetry's global provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracer = tp })
}

// saveTimeout bounds the save that ends a turn past its deadline.
const saveTimeout = 10 * time.Second
