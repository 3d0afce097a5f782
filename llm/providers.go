package llm

import (
	"net/http"
	"os"

	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// providerConfig is how NewProvider builds an SDK client.
type providerConfig struct {
	httpClient *http.Client
	maxRetries int
	getenv     func(string) (string, bool)
}

// DefaultMaxRetries is how many times a model call is retried by its SDK
// after a 429, a 408, a 409, a 5xx or a failed connection, waiting as the
// response's Retry-After (or Retry-After-Ms) says, else with exponential
// backoff.
const DefaultMaxRetries = 3

// NewProvider returns the provider of m, its SDK client configured from m
// (base URL, the API key read from the environment variable m.APIKeyEnv)
// and opts (WithHTTPClient, WithMaxRetries). A missing key variable is
// FailedPrecondition.
func NewProvider(m Model, opts ...Option) (Provider, error) {
	o := newOptions(opts)
	return newProvider(m, o)
}

func newProvider(m Model, o *options) (Provider, error) {
	cfg := providerConfig{httpClient: o.modelHTTPClient(), maxRetries: o.maxRetries, getenv: o.getenv}
	if cfg.getenv == nil {
		cfg.getenv = os.LookupEnv
	}
	var key string
	if m.APIKeyEnv != "" {
		k, ok := cfg.getenv(m.APIKeyEnv)
		if !ok || k == "" {
			return nil, errs.New(codes.FailedPrecondition, "model %s: the environment variable %s that model.api_key_env names is not set on this silo", m.Name, m.APIKeyEnv)
		}
		key = k
	}
	switch m.Provider {
	case ProviderOpenAI:
		return newOpenAI(m, key, cfg), nil
	case ProviderAnthropic:
		return newAnthropic(m, key, cfg), nil
	}
	return nil, errs.New(codes.InvalidArgument, "model.provider: unknown provider %q", clipText(m.Provider, 40))
}

// modelIdleConns is how many idle connections to its model's host a
// provider made without WithHTTPClient keeps for its next calls. The
// SDKs' default, Go's default transport, keeps 2 a host: with more
// conversations than that calling one model at once, most calls would
// open a connection (a TLS handshake, with a real provider) and close it
// after.
const modelIdleConns = 1024

// modelHTTPClient is the HTTP client of a provider made with o: the one
// WithHTTPClient gives, else one of its own with Go's default transport's
// settings, keeping up to modelIdleConns idle connections to the model's
// host. One per provider: the activations of a type share it.
func (o *options) modelHTTPClient() *http.Client {
	if o.httpClient != nil {
		return o.httpClient
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = modelIdleConns
	tr.MaxIdleConnsPerHost = modelIdleConns
	return &http.Client{Transport: tr}
}
