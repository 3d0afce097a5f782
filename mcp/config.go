package mcp

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/agentsilo/agentsilo/auth"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Addr is the HTTP listen address (--mcp-addr). Empty: no MCP server.
	Addr string
	// Auth is how callers are authenticated: the gateway's API keys (in
	// the x-api-key header or as "Authorization: Bearer KEY"), TLS
	// certificate and client CA (the same flags). Without API keys or
	// client certificates, callers declare their principal in the
	// x-agentsilo-principal header, which is allowed only on loopback (or
	// with Insecure).
	Auth auth.Config
	// Insecure lets a server without authentication listen on a
	// non-loopback address (the silo's --insecure).
	Insecure bool
	// CallTimeout bounds one tool call: the deadline of the Ask it becomes.
	// Default: 10 min.
	CallTimeout time.Duration
	// SessionTimeout closes an MCP session that had no request for this
	// long. Default: 10 min.
	SessionTimeout time.Duration
	// MaxSessions bounds the MCP sessions open at once on this server; an
	// initialize beyond it is refused (HTTP 400) until sessions close or
	// time out. Default: 10,000.
	MaxSessions int
	// Version is the server version announced to clients (agentsilo's).
	Version string
	// Silo names this silo (in its inbox addresses).
	Silo string
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{CallTimeout: 10 * time.Minute, SessionTimeout: 10 * time.Minute, MaxSessions: 10000, Version: "dev"}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if c.CallTimeout < 0 || c.SessionTimeout < 0 || c.MaxSessions < 0 {
		return fmt.Errorf("mcp: CallTimeout, SessionTimeout and MaxSessions must not be negative")
	}
	if c.Addr != "" && !c.Insecure && !c.Auth.Enabled() {
		if err := auth.CheckLoopback("mcp", c.Addr); err != nil {
			return err
		}
	}
	return nil
}
