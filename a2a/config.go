package a2a

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/agentsilo/agentsilo/auth"
	"github.com/agentsilo/agentsilo/grain"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Addr is the HTTP listen address (--a2a-addr). Empty: no A2A server.
	Addr string
	// PublicURL is the base URL clients reach this server at, as written in
	// agent cards (--a2a-public-url), e.g. https://agents.example.com.
	// Empty: the scheme and Host of each request.
	PublicURL string
	// Auth is how callers are authenticated: the gateway's API keys, TLS
	// certificate and client CA (the same flags). Without API keys or
	// client certificates, callers declare their principal in the
	// x-agentsilo-principal header, which is allowed only on loopback
	// (or with Insecure).
	Auth auth.Config
	// Insecure lets a server without authentication listen on a
	// non-loopback address (the silo's --insecure).
	Insecure bool
	// AllowPrivateNetworks turns off the SSRF guard of what the silo sends
	// out for A2A: push notifications and the A2A agent type's calls to
	// remote agents may then reach loopback, private and link-local
	// addresses (--a2a-allow-private-networks). For development and
	// trusted networks only. Default: off, such addresses are refused.
	AllowPrivateNetworks bool
	// LeaseTTL is the TTL of the etcd lease that marks this silo alive to
	// the others: when it expires (the silo died), the tasks it was
	// running are failed by the survivors. Default: 10 s.
	LeaseTTL time.Duration
	// TaskTimeout bounds one turn of an agent for A2A: the deadline of the
	// Ask that a message becomes (--a2a-task-timeout). Default: 10 min.
	TaskTimeout time.Duration
	// TaskRetention is how long a task in a terminal state (completed,
	// failed, canceled, rejected) is kept, with its push configs, before
	// etcd removes it (--a2a-task-retention); a read after that is
	// TaskNotFound. Tasks that end within one window share an etcd lease,
	// so a task may stay up to a minute (1% of the retention, at least a
	// second) longer. 0 keeps tasks until they are deleted in etcd.
	// Default: 24 h.
	TaskRetention time.Duration
	// DefaultAgent, if set, is the agent (Type:owner:alias, of a
	// registered type) whose card the host root serves at
	// /.well-known/agent-card.json instead of the directory card, so that
	// a client given only the host reaches it (--a2a-default-agent). The
	// directory stays at GET /a2a. Empty: the root serves the directory.
	DefaultAgent string
	// Version is the agent version written in cards (agentsilo's).
	Version string
	// Silo names this silo (in its push inbox addresses and its tasks).
	Silo string
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{LeaseTTL: 10 * time.Second, TaskTimeout: 10 * time.Minute, TaskRetention: 24 * time.Hour, Version: "dev"}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if c.LeaseTTL < 2*time.Second {
		return fmt.Errorf("a2a: LeaseTTL %v must be at least 2s", c.LeaseTTL)
	}
	if c.TaskRetention < 0 {
		return fmt.Errorf("a2a: TaskRetention %v must not be negative", c.TaskRetention)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("a2a: public URL %q: want http(s)://host[:port][/path]", c.PublicURL)
		}
	}
	if c.DefaultAgent != "" {
		if _, err := grain.ParseAddress(c.DefaultAgent); err != nil {
			return fmt.Errorf("a2a: default agent %q: want Type:owner:alias: %w", c.DefaultAgent, err)
		}
	}
	if c.Addr != "" && !c.Insecure && !c.Auth.Enabled() {
		if err := auth.CheckLoopback("a2a", c.Addr); err != nil {
			return err
		}
	}
	return nil
}

// baseURL returns the public base URL without a trailing slash.
func (c *Config) baseURL() string { return strings.TrimRight(c.PublicURL, "/") }
